"""Job routes: submit, list, get, cancel, replicas, logs (with follow: ``api/logs.py``), events, progress."""

from __future__ import annotations

import difflib
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from fairpod.model.jobs import JobSpec, JobState
from fairpod.server.access.auth import Auth, Principal, current_principal, require_team
from fairpod.server.access.jobtoken import JobTokenJob, job_for_token
from fairpod.server.api import array_refs
from fairpod.server.api.api_rules import JOB_FIELDS, JOB_FITS, PRIORITY_CLASS, SERVICE_QUOTA, rules
from fairpod.server.api.limits import MAX_EXACT, MAX_ID, SinceId, Whole
from fairpod.server.api.logs import log_response
from fairpod.server.api.views import job_view, replicas_view
from fairpod.server.core.api import Core
from fairpod.server.errors import Problem
from fairpod.store import Job

KEY_MAX, KEY_PATTERN = 255, r"^[\x21-\x7e]+$"  # an Idempotency-Key: printable ASCII without spaces


class ArraySubmit(BaseModel):
    """A job array: ``job`` once per index of ``array`` (Slurm's --array: 0-199%16, 1,3,5, 0-99:2)."""

    model_config = ConfigDict(extra="forbid")
    job: JobSpec
    array: str = Field(min_length=1, max_length=1000, description="indices, and %N: at most N tasks at a time")


ARRAY = ("array: indices in Slurm's --array form (0-199%16, 1,3,5, 0-99:2) within the array size limit; the job's "
         "name with its largest index is a valid job name")


class PriorityChange(BaseModel):
    priority_class: str | None = Field(max_length=40)  # a class of the policy; null: no class (the lowest)


class Progress(BaseModel):
    step: Annotated[int, Field(ge=0, le=MAX_EXACT, strict=True), Whole] | None = None  # an exact JSON number
    checkpoint: str | None = Field(default=None, max_length=4096)
    next_checkpoint_in: float | None = Field(default=None, ge=0, le=7 * 86400, strict=True)  # seconds; never a boolean


def as_json(data: dict[str, Any], status_code: int = 200, headers: dict[str, str] | None = None) -> JSONResponse:
    """The answer of a hot route (submit, list), rendered here in the route's thread: FastAPI would otherwise
    validate the returned dict in a second trip through the API's thread pool (behind requests that wait for
    the lock) and encode it on the event loop. The views are plain JSON already; the documented schema is the
    route's ``response_model``."""
    return JSONResponse(data, status_code=status_code, headers=headers)


async def submitted(cp: Core, spec: JobSpec, p: Principal, idempotency_key: str | None) -> JSONResponse:
    """A submit's answer once its caller, body and key are valid: the route's, and an API worker's lean door's
    (:mod:`fairpod.server.api.lean_submit`) with the same errors (:class:`Problem`, the store's)."""
    require_team(p, spec.team)
    # the submit and its view where it is written (a thread), awaited here; not created: an earlier one
    # with the key created it
    job, created, view = await cp.submit_answered(spec, p.name, idempotency_key,
                                                  lambda job: job_view(cp, job, detail=True, reader=p))
    if job.name != spec.name or job.team != spec.team:
        raise Problem(409, "idempotency key reused",
                      f"Idempotency-Key {idempotency_key!r} was used for job {job.team}/{job.name}")
    if not created:  # the first submit's job, as it is now: 200, not 201
        return as_json(view, 200, {"Idempotent-Replayed": "true"})
    return as_json(view, 201)


def add_routes(api: APIRouter, cp: Core) -> None:
    @api.post("/jobs", status_code=201, tags=["jobs"], response_model=dict[str, Any],
              openapi_extra=rules({400: [JOB_FITS], 422: [JOB_FIELDS, SERVICE_QUOTA]}))
    async def submit_job(spec: JobSpec, p: Auth,
                         idempotency_key: str | None = Header(default=None, max_length=KEY_MAX,
                                                              pattern=KEY_PATTERN,
                                                              description="a retry with the same key returns the "
                                                                          "first job instead of submitting another"),
                         ) -> JSONResponse:
        return await submitted(cp, spec, p, idempotency_key)

    @api.post("/jobs/array", status_code=201, tags=["jobs"], openapi_extra=rules({400: [JOB_FITS, ARRAY], 422: [JOB_FIELDS, SERVICE_QUOTA]}))
    def submit_job_array(body: ArraySubmit, p: Auth, response: Response,
                         idempotency_key: str | None = Header(default=None, max_length=KEY_MAX,
                                                              pattern=KEY_PATTERN),
                         ) -> dict[str, Any]:
        """Submit a job array in one request: one job ``NAME-INDEX`` per index, each with FAIRPOD_ARRAY_TASK_ID
        and SLURM_ARRAY_TASK_ID (and the array's id, count, min and max) in its env."""
        spec = body.job
        require_team(p, spec.team)
        tasks, created = cp.submit_array(spec, body.array, p.name, idempotency_key)  # not created: the key's
        first = job_view(cp, tasks[0])
        arr = first["array"] or {}
        if not created:
            if not arr or arr.get("name") != spec.name or tasks[0].team != spec.team:
                what = f"job array {tasks[0].team}/{arr['name']}" if arr else f"job {tasks[0].team}/{tasks[0].name}"
                raise Problem(409, "idempotency key reused", f"Idempotency-Key {idempotency_key!r} was used for {what}")
            response.status_code = 200
            response.headers["Idempotent-Replayed"] = "true"
        return {"array_job_id": tasks[0].id, "name": spec.name, "team": spec.team, "indices": body.array.split("%")[0],
                "limit": arr.get("limit"), "tasks": [{"id": t.id, "name": t.name, "task_id": i}
                                                     for t, i in zip(tasks, _task_ids(tasks), strict=True)]}

    @api.get("/jobs", tags=["jobs"], response_model=dict[str, Any])
    def list_jobs(
        p: Auth,
        team: str | None = None,
        state: list[JobState] | None = Query(default=None),
        limit: int = Query(default=500, ge=0, le=100_000, description="the newest N jobs (0: all)"),
        offset: int = Query(default=0, ge=0, le=MAX_ID, description="skip the newest N first"),
    ) -> JSONResponse:
        visible = p.visible_teams()
        if team is not None:
            known = [t.name for t in cp.spec.teams]
            if team not in known and not cp.queries.count_jobs(team=[team]):  # (a deleted team's jobs stay listed)
                mine = known if visible is None else [t for t in known if t in visible]
                close = difflib.get_close_matches(team, mine, n=1, cutoff=0.6)
                raise Problem(404, "unknown team", f"unknown team {team}" + (f" (did you mean {close[0]}?)" if close
                                                                             else f"; teams: {', '.join(mine)}"))
            if visible is not None and team not in visible:
                raise Problem(403, "forbidden", f"user {p.name} is not a member of team {team}")
            teams: list[str] | None = [team]
        else:
            teams = visible
        with cp.queries.read() as t:  # the page and its count from one snapshot, never behind the lock
            jobs = t.list_jobs(team=teams, state=state, limit=limit or None, offset=offset, descending=True)
            full_page = bool(limit) and len(jobs) == limit
            total = t.count_jobs(team=teams, state=state) if full_page or offset else len(jobs)
        jobs.reverse()  # the newest page, oldest first (newest last)
        cp.eta.ensure(cp, jobs)
        return as_json({"jobs": [job_view(cp, j) for j in jobs], "count": len(jobs), "total": total,
                        "truncated": offset + len(jobs) < total})

    @api.get("/jobs/{ref}", tags=["jobs"])
    def get_job(ref: str, p: Auth, team: str | None = None) -> dict[str, Any]:
        """A job by id or name; ``ID_T`` is task T of a job array. The array's name or id address the whole
        array: the answer is its first task with ``array_tasks``, every task's id, index, state and reason."""
        job, tasks = array_refs.resolve(cp, p, ref, team)
        cp.eta.ensure(cp, [job, *(tasks or [])])  # a job submitted since the last estimates gets one now
        out = job_view(cp, job, detail=True, reader=p)
        out["events"] = [{"ts": e.ts, "kind": e.kind, "message": e.message}
                         for e in cp.queries.list_events(job_id=job.id, limit=200)]
        if tasks is not None:
            out["array_tasks"] = [{k: v[k] for k in ("id", "name", "state", "reason", "estimated_start")}
                                  | {"task_id": (v["array"] or {}).get("task_id")}
                                  for v in (job_view(cp, t) for t in tasks)]
        return out

    @api.post("/jobs/{ref}/cancel", tags=["jobs"])
    def cancel_job(ref: str, p: Auth, team: str | None = None,
                   left: str | None = Query(default=None, max_length=200, description=(
                       "an interactive allocation its user left (salloc's shell exited: its words, e.g. 'the shell "
                       "exited 0'): a running job then ends Succeeded, as Slurm's COMPLETED, not Cancelled"))
                   ) -> dict[str, Any]:
        """Cancel a job; the array's name or id cancel every unfinished task of the array (held and pending
        tasks first, so none starts while the others stop): the answer lists them under ``cancelled``."""
        job, tasks = array_refs.resolve(cp, p, ref, team)
        require_team(p, job.team)
        if tasks is None:
            return job_view(cp, cp.cancel(job, p.name, left), detail=True, reader=p)
        live = sorted((t for t in tasks if not t.state.finished), key=lambda t: t.state != JobState.PENDING)
        arr = job_view(cp, job)["array"] or {}
        name = arr.get("name", job.name)
        done = [job_view(cp, t) for t in cp.cancel_array(live, f"{job.team}/{name}", p.name)]
        return {"array_job_id": arr.get("job_id", job.id), "name": name, "team": job.team,
                "tasks": len(tasks), "cancelled": done}

    @api.post("/jobs/{ref}/priority", tags=["jobs"], openapi_extra=rules({422: [PRIORITY_CLASS]}))
    def set_priority(ref: str, body: PriorityChange, p: Auth, team: str | None = None) -> dict[str, Any]:
        """Change a pending or running job's priority class; it keeps its place among jobs of the new priority and
        the engine decides again in its next cycle (an event ``JobPriorityChanged`` records it)."""
        job = array_refs.one_task(cp, p, ref, team)
        require_team(p, job.team)
        try:
            return job_view(cp, cp.set_priority(job, body.priority_class, p.name), detail=True, reader=p)
        except ValueError as e:
            raise Problem(422, "invalid priority class", f"priority_class: {e}") from None

    @api.get("/jobs/{ref}/replicas", tags=["jobs"])
    def list_replicas(ref: str, p: Auth, team: str | None = None) -> dict[str, Any]:
        job = array_refs.one_task(cp, p, ref, team)
        return {"job": job.name, "state": job.state.value, "replicas": replicas_view(cp, job)}

    @api.get("/jobs/{ref}/events", tags=["jobs"])
    def job_events(ref: str, p: Auth, team: str | None = None, since_id: SinceId = None) -> dict[str, Any]:
        job = array_refs.resolve(cp, p, ref, team)[0]
        evs = cp.queries.list_events(job_id=job.id, since_id=since_id, limit=1000)
        return {"events": [_ev(e) for e in evs]}

    @api.post("/jobs/{ref}/progress", tags=["jobs"])
    def report_progress(ref: str, body: Progress, request: Request, job_token: JobTokenJob,
                        team: str | None = None) -> dict[str, Any]:
        if job_token is not None:  # a replica with its job's token (fairpod.sdk.report_progress)
            job = job_for_token(cp, job_token, ref)
        else:
            p = current_principal(request)
            job = array_refs.find_job(cp, p, ref, team)
            require_team(p, job.team)
        return job_view(cp, cp.report_progress(job, body.step, body.checkpoint, body.next_checkpoint_in),
                        detail=True)

    @api.get("/jobs/{ref}/logs", tags=["jobs"], responses={206: {"description": "the byte range asked for"},
                                                           416: {"description": "a range outside the log"}})
    async def get_logs(ref: str, p: Auth, team: str | None = None, replica: int = Query(default=0, ge=0),
                       follow: bool = False,
                       tail: int | None = Query(default=None, ge=1, le=1_000_000,
                                                description="only the last this many lines (read from the end)"),
                       byte_range: str | None = Header(default=None, alias="Range", max_length=200,
                                                       description="one byte range (bytes=0-1023, bytes=-1024)"),
                       ) -> Response:
        job = array_refs.one_task(cp, p, ref, team)
        require_team(p, job.team)  # viewers may not read logs
        if replica >= job.nodes:
            raise Problem(404, "no such replica", f"job {job.name} has replicas 0..{job.nodes - 1}")
        if byte_range is not None and (follow or tail is not None):
            raise Problem(400, "invalid request", "a Range goes without follow and tail")
        return log_response(cp, job, replica, follow, tail, byte_range)


def _task_ids(tasks: list[Job]) -> list[int]:
    return [int(t.spec.env.get("FAIRPOD_ARRAY_TASK_ID", -1)) for t in tasks]


def _ev(e: Any) -> dict[str, Any]:
    return {"id": e.id, "ts": e.ts, "kind": e.kind, "job_id": e.job_id, "node": e.node, "team": e.team,
            "message": e.message, "data": e.data}
