"""Bearer tokens and team RBAC.

Roles: ``admin`` (everything: policy, teams, nodes, users), ``group-admin`` of one or more groups of the spec's
tree (creates, updates and deletes the teams below them, and acts for those teams' jobs as a member does; the
teams are read from the spec at each request, so a team moved under the group is managed at once), ``member`` of
one or more teams (submit, list,
cancel and read logs of those teams' jobs only), ``viewer`` (read the cluster, teams and jobs; no logs,
no changes). A member asking for another team's job gets 404, as if it did not exist; asking to act for
another team gets 403 naming the teams they belong to.

Under ``cluster.identity: unix`` (docs/identity.md) a caller may also be a Unix account: by its uid on the
control plane's Unix socket or by a MUNGE credential (:mod:`fairpod.server.access.identity`); root and fairpod's own
account are admins, others members of the teams whose ``unix_group`` they belong to and of the teams (and role)
the admin gave a fairpod user of the same name.
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from fairpod.model.spec import ClusterSpec
from fairpod.model.users import Role
from fairpod.server.access import identity
from fairpod.server.core.queries import Queries
from fairpod.server.errors import Problem
from fairpod.store.records import User


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role
    teams: tuple[str, ...]
    groups: tuple[str, ...] = ()  # a group admin's groups and every group below them

    @property
    def admin(self) -> bool:
        return self.role == Role.ADMIN

    def manages(self, team: str, group: str | None) -> bool:
        """May it create, change or delete team ``team`` (of ``group``)? An admin any, a group admin one below
        its groups."""
        return self.admin or (self.role == Role.GROUP_ADMIN and group in self.groups)

    def sees_team(self, team: str) -> bool:
        return self.role in (Role.ADMIN, Role.VIEWER) or team in self.teams

    def acts_for(self, team: str) -> bool:
        return self.role == Role.ADMIN or (self.role in (Role.MEMBER, Role.GROUP_ADMIN) and team in self.teams)

    def visible_teams(self) -> list[str] | None:
        """The teams whose jobs this principal may list; None means all."""
        return None if self.role in (Role.ADMIN, Role.VIEWER) else list(self.teams)


def below(spec: ClusterSpec, groups: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(teams, groups) of the tree below ``groups``, themselves included."""
    out = set(groups)
    for g in spec.groups_top_down():
        if g.parent in out:
            out.add(g.name)
    return tuple(t.name for t in spec.teams if t.group in out), tuple(sorted(out))


def unix_teams(spec: ClusterSpec, pw: pwd.struct_passwd) -> set[str]:
    """The teams whose ``unix_group`` the account belongs to (as its primary group or a listed member)."""
    out = set()
    for t in spec.teams:
        if not t.unix_group:
            continue
        try:
            g = grp.getgrnam(t.unix_group)
        except KeyError:
            continue
        if g.gr_gid == pw.pw_gid or pw.pw_name in g.gr_mem:
            out.add(t.name)
    return out


def unix_principal(store: Queries, spec: ClusterSpec | None, uid: int, how: str) -> Principal:
    """The fairpod user of the Unix account ``uid`` (recognised ``how``: for the error only)."""
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        raise Problem(401, "not authenticated", f"uid {uid} ({how}) has no account on this host") from None
    if uid in (0, os.geteuid()):
        return Principal(pw.pw_name, Role.ADMIN, ())
    teams = unix_teams(spec, pw) if spec is not None else set()
    user = store.get_user(pw.pw_name)
    if user is None:
        return Principal(pw.pw_name, Role.MEMBER, tuple(sorted(teams)))
    if user.role == Role.GROUP_ADMIN:
        below_teams, groups = below(spec, user.teams) if spec is not None else ((), ())
        return Principal(user.name, user.role, tuple(sorted(teams | set(below_teams))), groups)
    return Principal(user.name, user.role, tuple(sorted(teams | set(user.teams))))


def authenticate(store: Queries, request: Request, spec: ClusterSpec | None = None) -> Principal:
    unix = spec is not None and spec.cluster.identity == "unix"
    peer = request.scope.get(identity.PEER_KEY)
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if peer is not None and unix and not token:
        return unix_principal(store, spec, int(peer[1]), "the Unix socket's peer")
    if scheme.lower() == "munge":
        if not unix:
            raise Problem(401, "not authenticated", "MUNGE credentials are taken only under cluster.identity unix")
        raw = request.scope.get("raw_path") or request.url.path.encode()
        try:
            uid = identity.unmunge(token, f"{request.method} {raw.decode('latin-1')}")
        except identity.MungeError as e:
            raise Problem(401, "not authenticated", str(e)) from None
        return unix_principal(store, spec, uid, "MUNGE")
    if (scheme.lower() != "bearer" or not token) and unix:
        raise Problem(401, "not authenticated", "this cluster knows its users by their Unix account: use the CLI on "
                      "the control plane's host (its Unix socket), FAIRPOD_AUTH=munge from another host, or a token")
    if scheme.lower() != "bearer" or not token:
        raise Problem(401, "not authenticated",
                      "send 'Authorization: Bearer <token>'; the admin token is in the CLI config written by 'fairpod up'")
    if token.strip().startswith("fpj."):  # fairpod.server.access.jobtoken
        raise Problem(403, "forbidden", "a job token may only report the progress of its own job "
                      "(POST /api/v1/jobs/{id}/progress)")
    user = store.verify_token(token.strip())
    if user is None:
        raise Problem(401, "not authenticated", "the token is unknown or revoked")
    return principal_of(user, spec)


def principal_of(user: User, spec: ClusterSpec | None) -> Principal:
    """The principal of a fairpod user who gave a token (a group admin's teams read from the spec now)."""
    if user.role == Role.GROUP_ADMIN:
        teams, groups = below(spec, user.teams) if spec is not None else ((), ())
        return Principal(user.name, user.role, teams, groups)
    return Principal(user.name, user.role, tuple(user.teams))


def remembered(store: Queries, request: Request, spec: ClusterSpec | None) -> Principal | None:
    """The caller, when :func:`authenticate` would answer it from what this process verified a moment ago (a
    bearer token, ``Queries.verified_token``) without reading the database; None when only it can tell (any other
    credential, an identity of ``cluster.identity: unix``, a token not verified here lately or due its touch)."""
    return remembered_bearer(store, request.headers.get("authorization", ""), spec)


def remembered_bearer(store: Queries, authorization: str, spec: ClusterSpec | None) -> Principal | None:
    """:func:`remembered` of a request whose ``Authorization`` header is ``authorization`` ("" without one)."""
    if spec is not None and spec.cluster.identity == "unix":
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or token.startswith("fpj."):
        return None
    user = store.verified_token(token)
    return None if user is None else principal_of(user, spec)


def require_admin(p: Principal) -> None:
    if not p.admin:
        raise Problem(403, "forbidden", f"user {p.name} is a {p.role.value}; this needs the admin role")


def require_manager(p: Principal, team: str, groups: list[str | None]) -> None:
    """Admins, and a group admin for a team whose group (now and after the change) is below its groups."""
    if not all(p.manages(team, g) for g in groups):
        if p.role == Role.GROUP_ADMIN:
            mine = ", ".join(p.groups) or "none"
            raise Problem(403, "forbidden", f"user {p.name} manages only the teams below its groups ({mine}); "
                          f"team {team} would not be")
        raise Problem(403, "forbidden", f"user {p.name} is a {p.role.value}; this needs the admin role")


def require_team(p: Principal, team: str) -> None:
    if not p.acts_for(team):
        mine = ", ".join(p.teams) or "none"
        raise Problem(403, "forbidden", f"user {p.name} cannot act for team {team} (your teams: {mine})")


def current_principal(request: Request) -> Principal:
    cp = request.app.state.cp
    return authenticate(cp.queries, request, cp.spec)


async def principal(request: Request) -> Principal:
    """The routes' caller (:data:`Auth`). A bearer token verified a moment ago is answered here, in the event
    loop; any other (one to read from the database, a MUNGE credential, the Unix socket's peer) by
    :func:`current_principal` in a worker thread, as FastAPI runs a blocking dependency. That thread's round trip
    for every request was 9 % of an API worker's CPU under submits (benchmarks/README.md, "The caller without a
    thread")."""
    cp = request.app.state.cp
    known = remembered(cp.queries, request, cp.spec)
    return known if known is not None else await run_in_threadpool(current_principal, request)


Auth = Annotated[Principal, Depends(principal)]
