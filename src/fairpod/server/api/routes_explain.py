"""``GET /explain/teams`` and ``GET /explain/jobs/{ref}``: why one team gets more than another, why a job waits
(``fairpod explain``), from a consistent view of the engine's snapshot (``governance.explain``) that never waits for
a turn (``Core.engine_view``): ``as_of`` says which turn it is of."""

from __future__ import annotations

import copy
from typing import Any

from fastapi import APIRouter, Query

from fairpod.governance import explain
from fairpod.governance.snapshot import Snapshot
from fairpod.model.jobs import JobState
from fairpod.server.access.auth import Auth
from fairpod.server.api.api_rules import rules
from fairpod.server.api.array_refs import find_job
from fairpod.server.api.views import job_in_engine
from fairpod.server.core.api import AsOf, Core
from fairpod.server.errors import Problem


def _itype(snap: Snapshot, teams: list[str], given: str | None) -> str:
    types = sorted(snap.by_type) or sorted({it for t in snap.teams.values() for it in t.quota})
    if given is not None:
        if given not in types:
            raise Problem(422, "invalid request", f"instance_type: the cluster has no {given} (it has: "
                          f"{', '.join(types) or 'none'})")
        return given
    held = [it for it in types if any(snap.teams[t].q(it)[0] or snap.teams[t].u(it)[0] for t in teams)]
    if len(held) == 1 or (held and len(types) > 1 and len(set(held)) == 1):
        return held[0]
    if len(types) == 1:
        return types[0]
    raise Problem(422, "invalid request", f"name one instance type with instance_type ({', '.join(held or types)})")


def _names(cp: Core, p: Any, offers: list[dict[str, Any]]) -> None:
    """Job ids as names; a member sees the other teams' offers without their job names."""
    visible = p.visible_teams()
    for o in offers:
        job = cp.queries.get_job(int(o["job"])) if o["job"] and str(o["job"]).isdigit() else None
        o["job"] = None if visible is not None and o["team"] not in visible else (job.name if job else o["job"])


def view(cp: Core, key: tuple[Any, ...], fn: Any) -> tuple[Any, AsOf]:
    """``fn`` of a consistent view of the engine (a copy the route may change) and which turn it is of; 503 when a
    first read of it waited FIRST_WAIT for the core in vain (a turn held it that long)."""
    got = cp.engine_view(key, fn)
    if got is None:
        raise Problem(503, "busy", "the control plane has been in one scheduling turn for 30 s and has no view of "
                      "this yet; ask again in a moment (the turn publishes it when it ends)")
    return copy.deepcopy(got[0]), got[1]


def add_routes(api: APIRouter, cp: Core) -> None:
    @api.get("/explain/teams", tags=["explain"], openapi_extra=rules({422: [
        "instance_type: an instance type of the cluster; without it, the two teams hold quota or use of one only"]}))
    def explain_teams(p: Auth, team: list[str] = Query(description="two different teams", min_length=2,
                                                       max_length=2, json_schema_extra={"uniqueItems": True}),
                      instance_type: str | None = None) -> dict[str, Any]:
        if team[0] == team[1]:  # two of them: the query schema (minItems, maxItems)
            raise Problem(422, "invalid request", "name two different teams (team=X&team=Y)")
        for t in team:
            if cp.spec.team(t) is None:
                raise Problem(404, "no such team", f"no team {t!r}")
            if not p.sees_team(t):
                raise Problem(403, "forbidden", f"user {p.name} cannot see team {t}")

        a, b = team

        def compare(snap: Snapshot) -> dict[str, Any]:
            return explain.compare(snap, a, b, _itype(snap, [a, b], instance_type))

        out, as_of = view(cp, ("explain teams", a, b, instance_type), compare)
        _names(cp, p, out["next_idle"])
        out["as_of"] = as_of.json()
        return out

    @api.get("/explain/jobs/{ref}", tags=["explain"])
    def explain_job(ref: str, p: Auth, team: str | None = None) -> dict[str, Any]:
        job = find_job(cp, p, ref, team)
        out: dict[str, Any] = {"job": job.name, "team": job.team, "state": job.state.value, "reason": job.reason,
                               "instance_type": job.instance_type}

        jid, name, itype, pending = job.id, job.team, job.instance_type, job.state == JobState.PENDING

        def look(snap: Snapshot) -> dict[str, Any] | None:
            return job_in_engine(snap, jid, name, itype, pending)

        got, as_of = view(cp, ("explain job", jid, pending), look)
        out["as_of"] = as_of.json()
        if got is None:
            return out
        out.update(got)
        _names(cp, p, out.get("next_idle", []))
        return out
