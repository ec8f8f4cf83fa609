"""Service routes: a service's address and its ready endpoints (``fairpod get-service``, ``list-services``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from fairpod.model.jobs import JobState
from fairpod.server.access.auth import Auth
from fairpod.server.api.array_refs import find_job
from fairpod.server.core.api import Core
from fairpod.server.errors import Problem
from fairpod.store import Job


def service_view(cp: Core, job: Job) -> dict[str, Any]:
    """A service as ``get-service`` shows it: its address (None until it first ran in this control plane) and
    the endpoints that take requests now."""
    svc = job.spec.service
    assert svc is not None
    live = cp.services if cp.services is not None and not job.state.finished else None
    eps = live.endpoints(job.id) if live is not None else []
    return {
        "id": job.id, "name": job.name, "team": job.team, "state": job.state.value, "priority": job.spec.priority,
        "address": live.address(job.id) if live is not None else None,
        "replicas": job.nodes if job.state == JobState.RUNNING else 0,  # (a Pending service runs none yet)
        "min_replicas": job.spec.nodes, "max_replicas": job.spec.max_nodes or job.spec.nodes,
        "ready_replicas": len(eps),
        "endpoints": [{"rank": r, "address": f"http://{h}:{p}"} for r, h, p in eps],
        "draining": live.draining(job.id) if live is not None else [],
        "readiness": svc.check_text, "drain_seconds": svc.drain_seconds,
        "restarts": restarts(job) if not job.state.finished else [],
        "restart_backoff_seconds": svc.restart_backoff_seconds,
        "restart_backoff_max_seconds": svc.restart_backoff_max_seconds,
        "restart_reset_seconds": svc.restart_reset_seconds,
    }


def restarts(job: Job) -> list[dict[str, Any]]:
    """The replicas that exited in a row (a crash loop backs off): rank, exits in a row, and when the replica
    starts again (its restart backoff; in the past once it has started again), as stored with the run."""
    crashes = (job.run_state or {}).get("crashes") or {}
    return [{"rank": int(r), "exits_in_a_row": int(c[0]), "next_start_at": c[1]}
            for r, c in sorted(crashes.items(), key=lambda kv: int(kv[0])) if int(r) < job.nodes]


def add_routes(api: APIRouter, cp: Core) -> None:
    @api.get("/services/{ref}", tags=["services"], response_model=dict[str, Any])
    def get_service(ref: str, p: Auth, team: str | None = None) -> dict[str, Any]:
        job = find_job(cp, p, ref, team)
        if job.spec.service is None:
            raise Problem(404, "not a service", f"job {job.name} is not a service (see 'fairpod get-job {ref}')")
        return service_view(cp, job)

    @api.get("/services", tags=["services"], response_model=dict[str, Any])
    def list_services(p: Auth, team: str | None = None) -> dict[str, Any]:
        teams = [team] if team else p.visible_teams()
        if team is not None and not p.sees_team(team):
            raise Problem(403, "forbidden", f"user {p.name} is not a member of team {team}")
        with cp.queries.read() as t:
            jobs = t.list_jobs(team=teams, finished=False)
        return {"services": [service_view(cp, j) for j in jobs if j.spec.service is not None
                             and not j.state.finished]}
