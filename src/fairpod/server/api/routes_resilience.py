"""Routes a job's replicas call with its job token (``fairpod.sdk``): ``ready`` (gang readiness,
``server/core/transitions/readiness.py``), ``restarts`` (restarts in place of its attempt,
``server/core/transitions/restarts.py``) and ``recovered`` (a replica restarted in place got a peer's state,
``fairpod.sdk.peers``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from fairpod.server.access.auth import current_principal, require_team
from fairpod.server.access.jobtoken import JobTokenJob, job_for_token
from fairpod.server.api.array_refs import find_job
from fairpod.server.api.limits import Whole
from fairpod.server.core.api import Core
from fairpod.server.errors import Problem
from fairpod.store import Job


class Ready(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rank: Annotated[int, Field(ge=0, le=10_000, strict=True), Whole]  # 3.0 is 3, as JSON Schema's integer
    attempt: Annotated[int, Field(ge=0, le=1_000_000, strict=True), Whole]


class Recovered(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ranks: list[Annotated[int, Field(ge=0, le=10_000, strict=True), Whole]] = Field(min_length=1, max_length=64)
    source: Annotated[int, Field(ge=0, le=10_000, strict=True), Whole]
    step: Annotated[int, Field(ge=0, le=10**15, strict=True), Whole]
    seconds: float = Field(ge=0, le=30 * 86400, allow_inf_nan=False)
    state_bytes: Annotated[int, Field(ge=0, le=10**15, strict=True), Whole] = 0


def add_routes(api: APIRouter, cp: Core) -> None:
    def the_job(ref: str, request: Request, job_token: int | None, team: str | None) -> Job:
        if job_token is not None:
            return job_for_token(cp, job_token, ref)
        p = current_principal(request)
        job = find_job(cp, p, ref, team)
        require_team(p, job.team)
        return job

    @api.post("/jobs/{ref}/ready", tags=["jobs"])
    def replica_ready(ref: str, body: Ready, request: Request, job_token: JobTokenJob,
                      team: str | None = None) -> dict[str, Any]:
        job = the_job(ref, request, job_token, team)
        if not cp.replica_ready(job, body.rank, body.attempt):
            raise Problem(409, "not the live attempt",
                          f"job {job.name} has no live attempt {body.attempt} with a replica {body.rank}")
        return {"job": job.name, "rank": body.rank, "attempt": body.attempt, "ready": True}

    @api.post("/jobs/{ref}/recovered", tags=["jobs"])
    def replica_recovered(ref: str, body: Recovered, request: Request, job_token: JobTokenJob,
                          team: str | None = None) -> dict[str, Any]:
        job = the_job(ref, request, job_token, team)
        if not cp.replica_recovered(job, body.ranks, body.source, body.step, body.seconds):
            raise Problem(409, "no replica recovering",
                          f"job {job.name} has no replica {', '.join(map(str, body.ranks))} waiting for a peer's state")
        return {"job": job.name, "ranks": body.ranks, "source": body.source, "step": body.step, "recovered": True}

    @api.get("/jobs/{ref}/restarts", tags=["jobs"])
    def replica_restarts(ref: str, request: Request, job_token: JobTokenJob,
                         team: str | None = None) -> dict[str, Any]:
        job = the_job(ref, request, job_token, team)
        return {"job": job.name, **cp.replica_restarts(job)}
