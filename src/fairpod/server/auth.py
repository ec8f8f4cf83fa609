"""Bearer tokens and team RBAC.

Roles: ``admin`` (everything: policy, teams, nodes, users), ``member`` of one or more teams (submit, list,
cancel and read logs of those teams' jobs only), ``viewer`` (read the cluster, teams and jobs; no logs,
no changes). A member asking for another team's job gets 404, as if it did not exist; asking to act for
another team gets 403 naming the teams they belong to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from fairpod.model.users import Role
from fairpod.server.errors import Problem
from fairpod.store import Store


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role
    teams: tuple[str, ...]

    @property
    def admin(self) -> bool:
        return self.role == Role.ADMIN

    def sees_team(self, team: str) -> bool:
        return self.role in (Role.ADMIN, Role.VIEWER) or team in self.teams

    def acts_for(self, team: str) -> bool:
        return self.role == Role.ADMIN or (self.role == Role.MEMBER and team in self.teams)

    def visible_teams(self) -> list[str] | None:
        """The teams whose jobs this principal may list; None means all."""
        return None if self.role in (Role.ADMIN, Role.VIEWER) else list(self.teams)


def authenticate(store: Store, request: Request) -> Principal:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Problem(401, "not authenticated",
                      "send 'Authorization: Bearer <token>'; the admin token is in the CLI config written by 'fairpod up'")
    if token.strip().startswith("fpj."):  # fairpod.server.jobtoken
        raise Problem(403, "forbidden", "a job token may only report the progress of its own job "
                      "(POST /api/v1/jobs/{id}/progress)")
    user = store.verify_token(token.strip())
    if user is None:
        raise Problem(401, "not authenticated", "the token is unknown or revoked")
    return Principal(user.name, user.role, tuple(user.teams))


def require_admin(p: Principal) -> None:
    if not p.admin:
        raise Problem(403, "forbidden", f"user {p.name} is a {p.role.value}; this needs the admin role")


def require_team(p: Principal, team: str) -> None:
    if not p.acts_for(team):
        mine = ", ".join(p.teams) or "none"
        raise Problem(403, "forbidden", f"user {p.name} cannot act for team {team} (your teams: {mine})")


def current_principal(request: Request) -> Principal:
    return authenticate(request.app.state.cp.store, request)


Auth = Annotated[Principal, Depends(current_principal)]
