"""Cluster, node, team, policy, spec, user, audit and event-feed routes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Query
from pydantic import BaseModel, Field

from fairpod.model.spec import ClusterSpec, Policy, SpecError, Team, parse_spec
from fairpod.model.users import Role
from fairpod.server.access.auth import Auth, require_admin, require_manager
from fairpod.server.api.api_rules import POLICY_RULES, SPEC_RULES, TEAM_RULES, USER_RULES, body_of, rules
from fairpod.server.api.limits import Limit, SinceId
from fairpod.server.api.views import cluster_view, node_view, node_views
from fairpod.server.core.api import Core
from fairpod.server.errors import Problem


class FaultBody(BaseModel):
    kind: str = Field(default="", max_length=40)  # inject-fault: the fault
    fault_type: str = Field(default="Quarantined", max_length=80)  # quarantine: why
    reason: str = Field(default="quarantined by an admin", max_length=500)


class NewUser(BaseModel):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9._]*[a-z0-9])?$", max_length=64)
    role: Role = Role.MEMBER
    teams: list[str] = Field(default_factory=list)


def _apply(cp: Core, data: dict[str, Any], actor: str, action: str, target: str) -> dict[str, Any]:
    try:
        spec = parse_spec(data)
    except SpecError as e:
        raise Problem(422, "invalid spec", "; ".join(e.problems)) from None
    before = cp.spec.model_dump(mode="json")
    changed = spec.model_dump(mode="json") != before
    if changed:
        cp.replace_spec(spec, actor=actor, action=action)
        cp.audit(actor, action, target, {"spec": spec.model_dump(mode="json")})
    return {"changed": changed, "spec": cp.spec.model_dump(mode="json")}


def add_routes(api: APIRouter, cp: Core) -> None:
    @api.get("/cluster", tags=["cluster"])
    def get_cluster(p: Auth) -> dict[str, Any]:
        view = cluster_view(cp)
        visible = p.visible_teams()
        if visible is not None:
            view["teams"] = [t for t in view["teams"] if t["team"] in visible]
        return view

    @api.get("/spec", tags=["cluster"])
    def get_spec(p: Auth) -> dict[str, Any]:
        return cp.spec.model_dump(mode="json")

    @api.put("/spec", tags=["cluster"], openapi_extra={**rules({422: [SPEC_RULES]}), **body_of(ClusterSpec)})
    def put_spec(p: Auth, body: dict[str, Any] = Body(...)) -> dict[str, Any]:
        require_admin(p)
        return _apply(cp, body, p.name, "spec.apply", "cluster")

    @api.get("/nodes", tags=["nodes"])
    def list_nodes(p: Auth, limit: int = Query(default=0, ge=0, le=1_000_000, description="at most N nodes (0: all)"),
                   offset: int = Query(default=0, ge=0, le=1_000_000, description="skip the first N"),
                   problems_first: bool = Query(default=False, description="nodes that are not schedulable first"),
                   ) -> dict[str, Any]:
        """The nodes by name (pool-2 before pool-10); ``total``: how many there are in all; ``as_of``: the turn
        the engine's part (each node's jobs and free accelerators) is of, at most one turn old."""
        nodes = cp.queries.node_page(limit, offset, problems_first)
        views, as_of = node_views(nodes.page, cp, p)  # the engine's part (jobs, free) as of one turn: as_of
        return {"nodes": views, "total": nodes.total, "as_of": as_of}

    def _admin(p: Auth) -> None:  # a dependency: runs before the body is read, so a member gets 403, never 422
        require_admin(p)

    @api.post("/nodes/{name}/{action}", tags=["nodes"], dependencies=[Depends(_admin)])
    def node_action(name: str, action: str, p: Auth, body: FaultBody | None = None) -> dict[str, Any]:
        actions = ("cordon", "uncordon", "check", "reboot", "replace", "inject-fault", "quarantine", "unquarantine")
        if action not in actions:
            raise Problem(404, "unknown action", f"unknown node action {action!r} ({', '.join(actions)})")
        node = cp.queries.get_node(name)
        if node is None:
            raise Problem(404, "no such node", f"no node {name!r}")
        if action in ("cordon", "uncordon"):
            node = cp.cordon(name, action == "cordon")
            cp.event(f"Node{action.capitalize()}ed", f"node {name} {action}ed by {p.name}", node=name)
        elif action == "quarantine":
            why = body or FaultBody()
            node = cp.quarantine(name, why.fault_type or "Quarantined", why.reason or f"quarantined by {p.name}")
        elif action == "unquarantine":
            node = cp.release(name)
        else:
            if cp.health is None:
                raise Problem(409, "node health is off", "this control plane runs without node health")
            if action == "check":
                cp.health.request_check(name)
            elif action == "inject-fault":
                if body is None or not body.kind:
                    raise Problem(422, "invalid request", 'give the fault kind: {"kind": "xid"}')
                try:
                    cp.health.inject(name, body.kind)
                except ValueError as e:
                    raise Problem(422, "invalid request", str(e)) from None
            else:
                cp.health.request_recovery(name, action)
        cp.audit(p.name, f"node.{action}", name, body.model_dump() if body else {})
        return node_view(cp.queries.get_node(name) or node, cp)

    @api.get("/nodes/{name}/health", tags=["nodes"])
    def node_health(name: str, p: Auth, limit: Limit = 200) -> dict[str, Any]:
        node = cp.queries.get_node(name)
        if node is None:
            raise Problem(404, "no such node", f"no node {name!r}")
        evs = cp.queries.list_events(node=name, limit=limit, descending=True)
        return {"node": node_view(node, cp, p),
                "checks": [e.data for e in reversed(evs) if e.kind == "HealthCheck"],
                "events": [{"ts": e.ts, "kind": e.kind, "message": e.message} for e in reversed(evs)
                           if e.kind != "HealthCheck"]}

    @api.get("/teams", tags=["teams"])
    def list_teams(p: Auth) -> dict[str, Any]:
        visible = p.visible_teams()
        return {"teams": [t.model_dump(mode="json") for t in cp.spec.teams
                          if visible is None or t.name in visible]}

    @api.post("/teams", status_code=201, tags=["teams"], openapi_extra=rules({422: [TEAM_RULES]}))
    def create_team(team: Team, p: Auth) -> dict[str, Any]:
        require_manager(p, team.name, [team.group])
        if cp.spec.team(team.name):
            raise Problem(409, "team exists", f"team {team.name!r} exists already; use update")
        data = cp.spec.model_dump(mode="json")
        data["teams"].append(team.model_dump(mode="json"))
        _apply(cp, data, p.name, "team.create", team.name)
        return team.model_dump(mode="json")

    @api.put("/teams/{name}", tags=["teams"],
             openapi_extra=rules({422: ["name: the team's name in the URL", TEAM_RULES]}))
    def update_team(name: str, team: Team, p: Auth) -> dict[str, Any]:
        if team.name != name:
            raise Problem(422, "invalid request", "the team's name in the body must match the URL")
        old = cp.spec.team(name)
        if not old:
            raise Problem(404, "no such team", f"no team {name!r}")
        require_manager(p, name, [old.group, team.group])
        data = cp.spec.model_dump(mode="json")
        data["teams"] = [team.model_dump(mode="json") if t["name"] == name else t for t in data["teams"]]
        _apply(cp, data, p.name, "team.update", name)
        return team.model_dump(mode="json")

    @api.delete("/teams/{name}", tags=["teams"])
    def delete_team(name: str, p: Auth) -> dict[str, Any]:
        old = cp.spec.team(name)
        if not old:
            raise Problem(404, "no such team", f"no team {name!r}")
        require_manager(p, name, [old.group])
        data = cp.spec.model_dump(mode="json")
        data["teams"] = [t for t in data["teams"] if t["name"] != name]
        _apply(cp, data, p.name, "team.delete", name)
        return {"deleted": name}

    @api.get("/policy", tags=["policy"])
    def get_policy(p: Auth) -> dict[str, Any]:
        return cp.spec.policy.model_dump(mode="json")

    @api.put("/policy", tags=["policy"], openapi_extra=rules({422: [POLICY_RULES]}))
    def set_policy(policy: Policy, p: Auth) -> dict[str, Any]:
        require_admin(p)
        data = cp.spec.model_dump(mode="json")
        data["policy"] = policy.model_dump(mode="json")
        _apply(cp, data, p.name, "policy.set", "policy")
        return cp.spec.policy.model_dump(mode="json")

    @api.get("/users", tags=["users"])
    def list_users(p: Auth) -> dict[str, Any]:
        require_admin(p)
        return {"users": [{"name": u.name, "role": u.role.value, "teams": u.teams, "created_at": u.created_at}
                          for u in cp.queries.list_users()]}

    @api.post("/users", status_code=201, tags=["users"], openapi_extra=rules({422: [USER_RULES]}))
    def create_user(body: NewUser, p: Auth) -> dict[str, Any]:
        require_admin(p)
        if body.role == Role.GROUP_ADMIN:  # its teams are the groups it administers
            unknown = [g for g in body.teams if not cp.spec.group(g)]
            if unknown or not body.teams:
                raise Problem(422, "invalid request", f"unknown group(s): {', '.join(unknown)}" if unknown else
                              "a group admin needs at least one group (--group)")
        else:
            unknown = [t for t in body.teams if not cp.spec.team(t)]
            if unknown:
                raise Problem(422, "invalid request", f"unknown team(s): {', '.join(unknown)}")
        if body.role == Role.MEMBER and not body.teams:
            raise Problem(422, "invalid request", "a member needs at least one team (--team)")
        u, token = cp.create_user(body.name, body.role, body.teams, p.name)
        return {"name": u.name, "role": u.role.value, "teams": u.teams, "token": token}

    @api.post("/users/{name}/tokens", status_code=201, tags=["users"])
    def new_token(name: str, p: Auth) -> dict[str, Any]:
        require_admin(p)
        if cp.queries.get_user(name) is None:
            raise Problem(404, "no such user", f"no user {name!r}")
        token = cp.issue_token(name, "issued by " + p.name, p.name, "token.issue")
        return {"name": name, "token": token}

    @api.post("/users/{name}/revoke", tags=["users"])
    def revoke_user(name: str, p: Auth) -> dict[str, Any]:
        require_admin(p)
        if cp.queries.get_user(name) is None:
            raise Problem(404, "no such user", f"no user {name!r}")
        if name == p.name:
            raise Problem(409, "conflict", "you cannot revoke your own tokens")
        n = cp.revoke_user_tokens(name, p.name)
        return {"name": name, "revoked_tokens": n}

    @api.get("/audit", tags=["users"])
    def audit(p: Auth, limit: Limit = 200, since_id: SinceId = None) -> dict[str, Any]:
        require_admin(p)
        rows = cp.queries.list_audit(since_id=since_id, limit=limit, descending=since_id is None)
        return {"audit": [{"id": a.id, "ts": a.ts, "actor": a.actor, "action": a.action, "target": a.target,
                           "detail": a.detail} for a in rows]}

    @api.get("/events", tags=["events"])
    def events(p: Auth, since_id: SinceId = None, limit: Limit = 200) -> dict[str, Any]:
        evs = cp.queries.list_events(since_id=since_id, limit=limit, descending=since_id is None)
        visible = p.visible_teams()
        # nodes: the event's node, or the nodes it names (a job's start: its placement)
        out = [{"id": e.id, "ts": e.ts, "kind": e.kind, "job_id": e.job_id, "node": e.node, "team": e.team,
                "nodes": [e.node] if e.node else [str(n) for n in (e.data or {}).get("nodes") or ()],
                "message": e.message} for e in evs if visible is None or e.team is None or e.team in visible]
        return {"events": out}

