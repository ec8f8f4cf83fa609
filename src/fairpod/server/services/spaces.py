"""Spaces (docs/spaces.md): a user's JupyterLab or code-server, run as a service of one replica under governance.

A space NAME of team T is the team's latest job of that name with a ``service.space`` section. ``create`` submits
it (its command: ``fairpod.sdk.space`` with the IDE, run as the replica's user in its sandbox); ``stop`` cancels
the running job; ``start`` submits the same spec again (same owner); ``delete`` stops it and removes its files.
Its files live in ``<checkpoint root>/T/space.NAME`` (``FAIRPOD_CHECKPOINT_DIR`` of each of its runs, the
user's own, 0700), which outlives every run: a preemption, an idle stop or a stop keeps them.

Its address is a :class:`fairpod.server.services.space_proxy.SpaceProxy` that ``server.services`` opens in place of a
service's proxy (one port per space, kept across its runs in ``$FAIRPOD_HOME/services/space.T.NAME.port``). The
proxy asks :func:`decide` for every request; a browser signs in with a one-time link (``POST
/spaces/NAME/links``, bound to the user and the space). A space without a request through its proxy for its idle
time (``idle_minutes``, else the policy's ``space_idle_minutes``) is stopped by :func:`stop_idle`.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

import fairpod
from fairpod.model.jobs import JobSpec, JobState
from fairpod.model.services import ServiceSpec
from fairpod.model.spaces import SpaceSpec, files_key
from fairpod.model.spec import NAME_PATTERN
from fairpod.server.access.auth import Auth, Principal, below
from fairpod.server.api.api_rules import JOB_FITS, SERVICE_EXECUTOR, SERVICE_QUOTA, rules
from fairpod.server.api.routes_dashboard import SignInLinks
from fairpod.server.api.views import reason_now
from fairpod.server.core.api import Core
from fairpod.server.errors import Problem, WrongState
from fairpod.server.services.space_proxy import Backend, Sessions, SpaceProxy, Verdict
from fairpod.store import Job

LAUNCHER = Path(fairpod.__file__).parent / "sdk" / "space.py"  # run by path: the node's fairpod, no import of sdk


class SpaceBody(BaseModel):
    """``POST /spaces``: what ``fairpod space create`` and ``hyp create hyp-space`` send."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(pattern=NAME_PATTERN, max_length=63)
    team: str = Field(pattern=NAME_PATTERN, max_length=40)
    ide: str = Field(pattern=r"^(jupyter|code-server)$")
    access: str = Field(default="OwnerOnly", pattern=r"^(OwnerOnly|Public)$")
    accelerators: int = Field(default=0, ge=0, le=1024)
    priority: str | None = Field(default=None, max_length=63)
    instance_type: str | None = Field(default=None, max_length=63)
    vcpu: float | None = Field(default=None, gt=0, le=100_000)
    memory_gib: float | None = Field(default=None, gt=0, le=10_000_000)
    idle_minutes: float | None = Field(default=None, gt=0, le=7 * 24 * 60)


def files_dir(cp: Core, team: str, name: str) -> Path:
    return cp.checkpoint_root() / team / files_key(name)


def space_of(cp: Core, p: Principal, ref: str, team: str | None) -> Job:
    """The space ``ref`` (a name) of ``team`` (default: the caller's only team that has one) as ``p`` may see it."""
    teams = [team] if team else (p.visible_teams() or [t.name for t in cp.spec.teams])
    found = [j for j in cp.queries.jobs_named(teams, ref) if is_space(j)]
    if len(found) > 1:
        raise Problem(409, "ambiguous space name", f"teams {', '.join(j.team for j in found)} each have a space "
                      f"{ref!r}; give --team")
    if not found or not p.sees_team(found[0].team) or not exists(cp, found[0]):
        raise Problem(404, "no such space", f"no space {ref!r} that you can see ('fairpod space list')")
    return found[0]


def is_space(job: Job) -> bool:
    return job.spec.service is not None and job.spec.service.space is not None


def deleted_mark(cp: Core, job: Job) -> Path:
    """Written by delete before the space's job is stopped: a deleted space is gone at once, also while its IDE
    is still stopping (and whatever that IDE writes meanwhile)."""
    return cp.checkpoint_root() / job.team / f".{files_key(job.name)}.deleted-{job.id}"


def exists(cp: Core, job: Job) -> bool:
    """Not deleted: running or waiting, or stopped with its files."""
    if deleted_mark(cp, job).exists():
        return False
    return not job.state.finished or files_dir(cp, job.team, job.name).is_dir()


def may_open(p: Principal, job: Job) -> bool:
    """OwnerOnly: its owner only; Public: the members of its team."""
    space = job.spec.service.space if job.spec.service else None
    if space is None:
        return False
    if space.access == "Public" and job.team in p.teams:
        return True
    return p.name == job.spec.user and p.acts_for(job.team)  # an owner taken off the team is out


def may_manage(p: Principal, job: Job) -> bool:
    """Start, stop, delete: its owner and admins (and the members of its team for a Public space's stop)."""
    return p.admin or p.name == job.spec.user or (may_open(p, job) and job.team in p.teams)


def view(cp: Core, job: Job) -> dict[str, Any]:
    space = job.spec.service.space if job.spec.service else None
    assert space is not None
    proxy = cp.services.proxies.get(job.id) if cp.services is not None and not job.state.finished else None
    state = "Stopped" if job.state.finished else job.state.value
    return {"name": job.name, "team": job.team, "owner": job.spec.user, "ide": space.ide, "access": space.access,
            "state": state, "job_id": job.id, "job_state": job.state.value, "reason": reason_now(cp, job),
            "priority": job.spec.priority, "accelerators": job.spec.accelerators or 0,
            "preemptions": job.preemptions, "url": proxy.address if proxy is not None else None,
            "idle_minutes": idle_minutes(cp, job), "files": str(files_dir(cp, job.team, job.name))}


def idle_minutes(cp: Core, job: Job) -> float | None:
    space = job.spec.service.space if job.spec.service else None
    own = space.idle_minutes if space is not None else None
    return own if own is not None else cp.spec.policy.space_idle_minutes


def spec_of(body: SpaceBody) -> JobSpec:
    space = SpaceSpec(ide=body.ide, access=body.access, idle_minutes=body.idle_minutes)  # type: ignore[arg-type]
    vcpu, mem = body.vcpu, body.memory_gib
    if not body.accelerators:  # a space without accelerators: 1 vCPU and 2 GiB unless it says
        vcpu, mem = vcpu or 1.0, mem or 2.0
    return JobSpec(name=body.name, team=body.team, priority=body.priority, instance_type=body.instance_type,
                   nodes=1, accelerators=body.accelerators, vcpu=vcpu, memory_gib=mem,
                   command=[sys.executable, str(LAUNCHER), body.ide],
                   env={"FAIRPOD_SPACE_BASE": f"/spaces/{body.team}/{body.name}/"},
                   service=ServiceSpec(space=space, restart_backoff_seconds=1.0),
                   labels={"fairpod.dev/space": body.ide})


# -- the proxy's side -------------------------------------------------------------------------------------------


def principal_of(cp: Core, user: str | None, token: str | None) -> Principal | None:
    """The signed-in user of a session, or the owner of a fairpod token; None when unknown or revoked."""
    u = cp.queries.get_user(user) if user is not None else cp.queries.verify_token(token) if token else None
    if u is None:
        return None
    if u.role.value == "group-admin":
        teams, groups = below(cp.spec, list(u.teams))
        return Principal(u.name, u.role, teams, groups)
    return Principal(u.name, u.role, tuple(u.teams))


def decide(cp: Core, team: str, name: str, user: str | None, token: str | None) -> Verdict:
    p = principal_of(cp, user, token)
    if p is None:
        return Verdict(status=401, page="<p>Unknown or revoked sign-in: run <code>fairpod space open</code>.</p>")
    job = cp.queries.get_job_by_name(team, name)
    if job is None or not is_space(job) or not exists(cp, job):
        return Verdict(status=404, page=f"<p>No space {name} in team {team}.</p>")
    if not may_open(p, job):
        return Verdict(status=403, page=f"<p>Space {name} is {job.spec.service.space.access}; user "  # type: ignore
                       f"{p.name} may not open it.</p>")
    if job.state.finished:
        return Verdict(status=503, page=f"<p>Space {name} is stopped; its files are kept. Start it with "
                       f"<code>fairpod space start {name}</code>.</p>", retry=True)
    eps = cp.services.endpoints(job.id) if cp.services is not None else []
    if job.state != JobState.RUNNING or not eps:
        why = reason_now(cp, job) or job.state.value
        pre = f" It was preempted {job.preemptions} time(s)." if job.preemptions else ""
        return Verdict(status=503, retry=True, page=(
            f"<p id=state>Space {name} is {job.state.value}: {_esc(why)}.{pre}</p><p id=files>Your files are kept "
            "and the space starts again by itself when capacity is free; this page opens it then.</p>"))
    try:
        secret = (files_dir(cp, team, name) / ".fairpod" / "ide-token").read_text().strip()
    except OSError:
        return Verdict(status=503, retry=True, page="<p>The IDE is starting.</p>")
    _, host, port = eps[0]
    return Verdict(backend=Backend(host, port, secret, job.spec.service.space.ide))  # type: ignore[union-attr]


def _esc(text: str) -> str:
    import html

    return html.escape(text)


LINKS = SignInLinks()  # one-time sign-in codes of every space: "user\0home\0team/name"
SESSIONS: dict[tuple[str, str, str], Sessions] = {}  # (control plane's home, team, name) -> its browser sessions


def open_proxy(cp: Core, jid: int, team: str, name: str) -> SpaceProxy:
    """The proxy of space ``team``/``name`` (job ``jid``), on the port it had before when that is free."""
    f = cp.home / "services" / f"space.{team}.{name}.port"
    want = int(f.read_text()) if f.exists() and f.read_text().strip().isdigit() else 0

    def redeem(code: str) -> str | None:
        hit = LINKS.redeem(code, time.monotonic())
        user, _, where = (hit or "").partition("\0")  # user, then home\0team/name
        return user if hit and where == f"{cp.home}\0{team}/{name}" else None

    def judge(user: str | None, token: str | None) -> Verdict:
        return decide(cp, team, name, user, token)

    # a browser stays signed in across the space's runs
    sessions = SESSIONS.setdefault((str(cp.home), team, name), Sessions())
    try:
        proxy = SpaceProxy(team, name, judge, redeem, port=want, sessions=sessions)
    except OSError:
        proxy = SpaceProxy(team, name, judge, redeem, sessions=sessions)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(str(proxy.port))
    return proxy


def stop_idle(cp: Core) -> None:
    """Cancel each running space with no request through its proxy for its idle time (its files stay); the time
    counts from its last request or from the start of this run, whichever is later (a preempted space that waited
    for capacity is not idle for that wait)."""
    if cp.services is None:
        return
    for jid, proxy in list(cp.services.proxies.items()):
        if not isinstance(proxy, SpaceProxy):
            continue
        job = cp.queries.get_job(jid)
        if job is None or job.state != JobState.RUNNING:
            continue
        limit = idle_minutes(cp, job)
        idle = min(time.monotonic() - proxy.last_request, cp.clock() - (job.started_at or cp.clock()))
        if limit is not None and idle >= limit * 60:
            try:
                cp.cancel(job, "fairpod")
            except WrongState:  # stopped meanwhile
                continue
            cp.event("SpaceIdle", f"space {job.name} stopped after {limit:g} min without a request; its files are "
                     "kept ('fairpod space start')", job)


# -- the API ----------------------------------------------------------------------------------------------------


def add_routes(api: APIRouter, cp: Core) -> None:
    from fairpod.server.access.auth import require_team

    @api.post("/spaces", status_code=201, tags=["spaces"], response_model=dict[str, Any],
              openapi_extra=rules({400: [JOB_FITS, SERVICE_EXECUTOR], 422: [SERVICE_QUOTA]}))
    def create_space(body: SpaceBody, p: Auth) -> dict[str, Any]:
        require_team(p, body.team)
        old = cp.queries.get_job_by_name(body.team, body.name)
        if old is not None and (not old.state.finished or (is_space(old) and exists(cp, old))):
            raise Problem(409, "space exists", f"team {body.team} has a {'space' if is_space(old) else 'job'} "
                          f"{body.name} already ('fairpod space start {body.name}' runs a stopped space again)")
        job = cp.submit(spec_of(body), p.name)
        # the space exists from now until deleted, also when stopped before it ever ran; its first run's
        # supervisor hands the directory to the replica's user (sandbox.environment.hand_over)
        files_dir(cp, job.team, job.name).mkdir(mode=0o700, parents=True, exist_ok=True)
        return view(cp, job)

    @api.get("/spaces", tags=["spaces"], response_model=dict[str, Any])
    def list_spaces(p: Auth, team: str | None = None) -> dict[str, Any]:
        if team is not None and not p.sees_team(team):
            raise Problem(403, "forbidden", f"user {p.name} is not a member of team {team}")
        teams = [team] if team else p.visible_teams()
        with cp.queries.read() as t:
            jobs = t.list_jobs(team=teams, descending=True, limit=5000)
        latest: dict[tuple[str, str], Job] = {}
        for j in jobs:
            latest.setdefault((j.team, j.name), j)
        return {"spaces": [view(cp, j) for j in latest.values() if is_space(j) and exists(cp, j)]}

    @api.get("/spaces/{name}", tags=["spaces"], response_model=dict[str, Any])
    def get_space(name: str, p: Auth, team: str | None = None) -> dict[str, Any]:
        return view(cp, space_of(cp, p, name, team))

    def managed(name: str, p: Principal, team: str | None) -> Job:
        job = space_of(cp, p, name, team)
        if not may_manage(p, job):
            raise Problem(403, "forbidden", f"space {name} is {job.spec.user}'s (OwnerOnly); user {p.name} may "
                          "not change it")
        return job

    @api.post("/spaces/{name}/stop", tags=["spaces"], response_model=dict[str, Any])
    def stop_space(name: str, p: Auth, team: str | None = None) -> dict[str, Any]:
        job = managed(name, p, team)
        if job.state.finished:
            raise Problem(409, "space stopped", f"space {name} is stopped already")
        return view(cp, cp.cancel(job, p.name))

    @api.post("/spaces/{name}/start", tags=["spaces"], response_model=dict[str, Any])
    def start_space(name: str, p: Auth, team: str | None = None) -> dict[str, Any]:
        job = managed(name, p, team)
        if not job.state.finished:
            raise Problem(409, "space running", f"space {name} is {job.state.value} already")
        return view(cp, cp.submit(job.spec, job.spec.user or p.name))  # its owner stays its owner

    @api.delete("/spaces/{name}", tags=["spaces"], response_model=dict[str, Any])
    def delete_space(name: str, p: Auth, team: str | None = None) -> dict[str, Any]:
        job = managed(name, p, team)
        mark = deleted_mark(cp, job)
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.touch()
        if not job.state.finished:
            job = cp.cancel(job, p.name)
        shutil.rmtree(files_dir(cp, job.team, job.name), ignore_errors=True)
        cp.audit(p.name, "space.delete", f"{job.team}/{job.name}", {"id": job.id})
        return {**view(cp, job), "state": "Deleted"}

    @api.post("/spaces/{name}/links", status_code=201, tags=["spaces"], response_model=dict[str, Any])
    def space_link(name: str, p: Auth, team: str | None = None) -> dict[str, Any]:
        """A one-time link (two minutes) that signs a browser in to the space as the caller."""
        job = space_of(cp, p, name, team)
        if not may_open(p, job):
            svc = job.spec.service  # a space's: space_of found only spaces
            access = svc.space.access if svc is not None and svc.space is not None else None
            raise Problem(403, "forbidden", f"space {name} is {job.spec.user}'s ({access}); user {p.name} may not "
                          "open it")
        url = view(cp, job)["url"]
        if url is None:
            raise Problem(409, "space not running", f"space {name} is {view(cp, job)['state']}: "
                          f"{reason_now(cp, job) or 'not running yet'}; its address comes once it first runs")
        code = LINKS.issue(f"{p.name}\0{cp.home}\0{job.team}/{job.name}", time.monotonic())
        return {"url": f"{url}_fairpod/signin?code={code}", "address": url, "expires_in": 120}
