"""API routes the dashboard needs beside the others: who am I, usage history, the task overview."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from typing import Any, Protocol

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from fairpod.model.jobs import JobState
from fairpod.server.access.auth import Auth
from fairpod.server.accounting.usage import WINDOWS, history
from fairpod.server.api.queue_positions import queue_positions
from fairpod.server.api.views import reason_now
from fairpod.server.core.api import Core
from fairpod.server.core.queries import RecentRow, TaskRow
from fairpod.server.errors import Problem

PAGE_ORDER = (JobState.RUNNING, JobState.PREEMPTED, JobState.PENDING)  # the task overview's order of states


class _Placed(Protocol):
    """A job, or one of the light rows of ``cp.queries`` (``unfinished_rows``, ``recent_rows``)."""

    @property
    def placement(self) -> list[str]: ...
    @property
    def instance_type(self) -> str: ...


def _teams_for(cp: Core, visible: list[str] | None, team: str | None, user: str) -> list[str] | None:
    if team is None:
        return visible
    if visible is not None and team not in visible:
        raise Problem(403, "forbidden", f"user {user} is not a member of team {team}")
    return [team]


WINDOW_ENUM = {"enum": ["1h", "6h", "1d", "7d"]}  # the keys of usage.WINDOWS, stated in the API document
SERIES_ENUM = {"enum": ["all", "groups"]}  # /usage/history's series


def _window(window: str) -> float:
    if window not in WINDOWS:
        raise Problem(422, "invalid request", f"window: {window!r} is not one of {', '.join(WINDOWS)}")
    return WINDOWS[window][0]


def tasks_view(cp: Core, teams: list[str] | None, group: str | None, states: list[JobState] | None,
               window: str, finished_limit: int, limit: int = 500, offset: int = 0) -> dict[str, Any]:
    """Counts over every unfinished job and the recent window; the unfinished tasks' rows from ``offset``, at
    most ``limit`` (their order: running, stopping, pending; by team, queue position, submission). The queue
    positions are the engine's as of the last turn while one runs (``queue_positions``: never a wait)."""
    span = _window(window)
    now = cp.clock()
    counts = {s.value: 0 for s in JobState}
    want = set(states) if states else None
    if group is None:  # counted in the store; only the page's (state, team) runs read (task_index.unfinished_page)
        unfinished = cp.queries.unfinished_counts(teams)
        for state in PAGE_ORDER:
            counts[state.value] = unfinished.count(state)
        waiting_again = unfinished.waiting_again
        shown = tuple(s for s in PAGE_ORDER if want is None or s in want)
        total = sum(unfinished.count(s) for s in shown)
        runs = cp.queries.page_runs(unfinished, shown, offset, limit)
        positions, as_of = queue_positions(cp, runs.teams())  # the page's teams only
        page_ids = cp.queries.unfinished_page(runs, positions)
        fig = cp.queries.window_figures(now - span, now + 1, teams, states, finished_limit)
    else:  # an instance group's jobs: by their placement or instance type, row by row
        positions, as_of = queue_positions(cp, teams)
        active, recent = _group_rows(cp, teams, group, now - span, now + 1)
        for j in active:
            counts[j.state.value] += 1
        waiting_again = sum(1 for j in active if j.state == JobState.PENDING and j.preemptions > 0)
        rows = [j for j in active if want is None or j.state in want]
        rows.sort(key=lambda j: (PAGE_ORDER.index(j.state), j.team, positions.get(j.id, 0), j.seq))
        total = len(rows)
        page_ids = [r.id for r in rows[offset:offset + limit]]
        fig = cp.queries.window_figures_of(recent, now - span, states, finished_limit)
    for state, n in fig.finished.items():
        counts[state.value] += n
    (admitted, waited), (finished, ran) = fig.waited, fig.ran
    found = cp.queries.get_jobs(page_ids)
    page = [found[i] for i in page_ids if i in found]  # one that ended meanwhile and was deleted: left out
    found = cp.queries.get_jobs(fig.ended)
    done = [found[i] for i in fig.ended if i in found]
    out = []
    for job in page + done:
        end = job.finished_at if job.finished_at is not None else now
        out.append({
            "id": job.id, "name": job.name, "team": job.team, "priority": job.spec.priority, "priority_weight": job.priority,
            "state": job.state.value, "queue_position": positions.get(job.id), "reason": reason_now(cp, job),
            "estimated_start": cp.eta.get(job),
            "instance_type": job.instance_type, "nodes": job.nodes, "accelerators": job.nodes * job.acc,
            "min_nodes": job.spec.nodes if job.spec.max_nodes else None, "max_nodes": job.spec.max_nodes,
            "placement": job.placement, "borrowed_from": job.borrowed_from, "preemptions": job.preemptions,
            "restarts": job.attempt, "submit_time": job.submit_time, "first_started_at": job.first_started_at,
            "finished_at": job.finished_at,
            "wait_seconds": round((job.first_started_at if job.first_started_at is not None else end) - job.submit_time, 3),
            "run_seconds": None if job.first_started_at is None else round(end - job.first_started_at, 3),
        })  # fmt: skip
    return {
        "window": window, "now": now, "counts": counts, "waiting_after_preemption": waiting_again,
        "avg_wait_seconds": round(waited / admitted, 3) if admitted else None,
        "avg_run_seconds": round(ran / finished, 3) if finished else None,
        "admitted_in_window": admitted, "finished_in_window": finished, "tasks": out,
        "unfinished_total": total, "offset": offset, "limit": limit, "queue_positions_at": as_of.at,
        "queue_positions_as_of": as_of.json(),
    }


def _group_rows(cp: Core, teams: list[str] | None, group: str, since: float, until: float
                ) -> tuple[list[TaskRow], list[RecentRow]]:
    """An instance group's unfinished jobs and those of the window from ``since`` (``cp.queries.recent_rows``),
    as rows: its jobs are those placed on its nodes, or of its instance type while they wait."""
    g = next((g for g in cp.spec.cluster.instance_groups if g.name == group), None)
    if g is None:
        names = ", ".join(g.name for g in cp.spec.cluster.instance_groups)
        raise Problem(404, "no such instance group", f"no instance group {group!r} (there are: {names})")
    group_type = g.node_type
    group_nodes = {n.name for n in cp.queries.list_nodes(instance_group=group)}

    def in_group(j: _Placed) -> bool:
        if j.placement:
            return any(n in group_nodes for n in j.placement)
        return j.instance_type == group_type

    return ([j for j in cp.queries.unfinished_rows(teams, True) if in_group(j)],
            [j for j in cp.queries.recent_rows(since, until, teams, True) if in_group(j)])


LINK_SECONDS = 120  # how long a one-time sign-in link stays valid
MAX_LINKS = 1000  # links waiting to be used, at most (the oldest go first)


class SignInLinks:
    """One-time dashboard sign-in codes, in memory: a code signs in once, within LINK_SECONDS, as the user who
    asked for it (``fairpod dashboard``). Only the code's hash is kept; the URL never holds a token."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.codes: dict[str, tuple[str, float]] = {}  # sha256(code) -> (user, expiry)

    def issue(self, user: str, now: float) -> str:
        code = secrets.token_urlsafe(24)
        with self.lock:
            self.codes = {k: v for k, v in self.codes.items() if v[1] > now}
            while len(self.codes) >= MAX_LINKS:
                self.codes.pop(next(iter(self.codes)))
            self.codes[hashlib.sha256(code.encode()).hexdigest()] = (user, now + LINK_SECONDS)
        return code

    def redeem(self, code: str, now: float) -> str | None:
        with self.lock:
            hit = self.codes.pop(hashlib.sha256(code.encode()).hexdigest(), None)
        return hit[0] if hit is not None and hit[1] > now else None


class Redeem(BaseModel):
    code: str = Field(min_length=1, max_length=200)


def add_routes(api: APIRouter, cp: Core) -> None:
    links = SignInLinks()

    @api.post("/dashboard/links", status_code=201, tags=["dashboard"])
    def new_signin_link(p: Auth) -> dict[str, Any]:
        """A one-time code that signs the dashboard in as the caller (``/#signin=CODE``), once, within two
        minutes."""
        return {"code": links.issue(p.name, time.monotonic()), "user": p.name, "expires_in": LINK_SECONDS}

    @api.post("/dashboard/links/redeem", tags=["dashboard"])
    def redeem_signin_link(body: Redeem) -> dict[str, Any]:
        """Trade a one-time code for a dashboard session token of its user (kept in the tab's sessionStorage)."""
        user = links.redeem(body.code, time.monotonic())
        if user is None:
            raise Problem(401, "not authenticated", "the sign-in link is unknown, used or expired; run "
                          "'fairpod dashboard' for a new one")
        if cp.queries.get_user(user) is None:
            raise Problem(401, "not authenticated", f"user {user} no longer exists")
        token = cp.issue_token(user, "dashboard sign-in link", user, "dashboard.signin")
        return {"token": token, "user": user}

    @api.get("/me", tags=["dashboard"])
    def me(p: Auth) -> dict[str, Any]:
        """The caller: name, role and teams (all teams for admins and viewers)."""
        visible = p.visible_teams()
        return {"name": p.name, "role": p.role.value, "teams": list(p.teams),
                "visible_teams": visible if visible is not None else [t.name for t in cp.spec.teams],
                "cluster": cp.spec.cluster.name,
                "instance_groups": [{"name": g.name, "instance_type": g.instance_type, "count": g.count}
                                    for g in cp.spec.cluster.instance_groups]}

    @api.get("/usage/history", tags=["dashboard"])
    def usage_history(p: Auth, window: str = Query(default="1h", description="1h, 6h, 1d or 7d",
                                                         json_schema_extra=WINDOW_ENUM),
                      series: str = Query(default="all", description="all: the instance groups' and the teams' "
                                          "series; groups: the instance groups' only (the cluster page: at "
                                          "datacenter size the teams' series are most of the answer)",
                                          json_schema_extra=SERIES_ENUM)
                      ) -> dict[str, Any]:
        """Mean accelerators, vCPU and memory in use per instance group, and per team in use / quota /
        borrowed / lent, per time bucket over the window (members: their teams)."""
        _window(window)
        if series not in SERIES_ENUM["enum"]:
            raise Problem(422, "invalid request", f"series: {series!r} is not one of {', '.join(SERIES_ENUM['enum'])}")
        return history(cp, window, p.visible_teams(), groups_only=series == "groups")

    @api.get("/dashboard/tasks", tags=["dashboard"])
    def dashboard_tasks(
        p: Auth,
        team: str | None = None,
        instance_group: str | None = None,
        state: list[JobState] | None = Query(default=None),
        window: str = Query(default="1d", description="for the averages and finished counts: 1h, 6h, 1d, 7d",
                            json_schema_extra=WINDOW_ENUM),
        finished: int = Query(default=50, ge=0, le=1000, description="how many recently finished tasks to list"),
        limit: int = Query(default=500, ge=0, le=10_000, description="unfinished tasks listed, at most (the "
                           "counts cover all; unfinished_total says how many match)"),
        offset: int = Query(default=0, ge=0, le=10_000_000, description="skip the first N unfinished tasks"),
    ) -> dict[str, Any]:
        """Counts by state, average wait and run time, and the task table with queue positions and reasons."""
        teams = _teams_for(cp, p.visible_teams(), team, p.name)
        return tasks_view(cp, teams, instance_group, state, window, finished, limit, offset)
