"""Spec history, rollback and dry runs: ``/spec/history``, ``/spec/history/{version}``, ``/spec/rollback``,
``/spec/dry-run`` (admins; the history is readable by every signed-in user, as ``/spec`` is)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, Field

from fairpod.model.spec import ClusterSpec, SpecError, parse_spec
from fairpod.server.access.auth import Auth, require_admin
from fairpod.server.api.api_rules import SPEC_RULES, body_of, rules
from fairpod.server.api.limits import MAX_EXACT, MAX_ID, Whole
from fairpod.server.api.spec_changes import diff, dry_run
from fairpod.server.core.api import Core
from fairpod.server.errors import Problem
from fairpod.store import NotFound


class Rollback(BaseModel):
    version: Annotated[int, Whole] = Field(ge=1, le=MAX_EXACT, strict=True, description="the spec version to go back to")


def add_routes(api: APIRouter, cp: Core) -> None:
    @api.get("/spec/history", tags=["cluster"])
    def spec_history(p: Auth, limit: int = Query(default=100, ge=1, le=10_000)) -> dict[str, Any]:
        """Every applied spec version, newest first: who applied it, when, and how."""
        current = cp.queries.spec_version()
        return {"current": current, "versions": [
            {"version": v.version, "applied_at": v.applied_at, "actor": v.actor, "action": v.action,
             "current": v.version == current} for v in cp.queries.spec_history(limit)]}

    @api.get("/spec/history/{version}", tags=["cluster"])
    def spec_version(version: int, p: Auth) -> dict[str, Any]:
        """One version of the spec, and its diff against the spec in force."""
        if not 1 <= version <= MAX_ID:
            raise Problem(404, "not found", f"spec version {version} is not in the history")
        try:
            v = cp.queries.spec_at(version)
        except NotFound as e:
            raise Problem(404, "not found", str(e)) from None
        assert v.spec is not None
        return {"version": v.version, "applied_at": v.applied_at, "actor": v.actor, "action": v.action,
                "spec": v.spec.model_dump(mode="json"), "diff_to_current": diff(cp.spec, v.spec, "current",
                                                                                f"version {v.version}")}

    @api.post("/spec/dry-run", tags=["cluster"], openapi_extra={**rules({422: [SPEC_RULES]}), **body_of(ClusterSpec)})
    def spec_dry_run(p: Auth, body: dict[str, Any] = Body(...)) -> dict[str, Any]:
        """What applying this spec would do now: the diff against the live spec, the running jobs the engine
        would preempt and the pending jobs it would start. Nothing is changed."""
        require_admin(p)
        try:
            new = parse_spec(body)
        except SpecError as e:
            raise Problem(422, "invalid spec", "; ".join(e.problems)) from None
        return dry_run(cp, new)

    @api.post("/spec/rollback", tags=["cluster"])
    def spec_rollback(body: Rollback, p: Auth) -> dict[str, Any]:
        """Apply an earlier version of the spec again (as a new version)."""
        require_admin(p)
        try:
            v = cp.queries.spec_at(body.version)
        except NotFound as e:
            raise Problem(404, "not found", str(e)) from None
        assert v.spec is not None
        changed = v.spec.model_dump(mode="json") != cp.spec.model_dump(mode="json")
        if changed:
            cp.replace_spec(v.spec, actor=p.name, action=f"spec.rollback to {v.version}")
            cp.audit(p.name, "spec.rollback", "cluster", {"to_version": v.version})
        return {"changed": changed, "version": cp.queries.spec_version(), "spec": cp.spec.model_dump(mode="json")}
