"""Pages for the dashboard at datacenter size (``benchmarks/datacenter.py``): the unfinished jobs as light rows,
read in one query without building a job record each (the task overview counts and orders every unfinished job,
100,000 in a datacenter, but reads in full only the page it shows), the jobs that started or finished in the
overview's window as light rows too (its averages and counts), and a page of the nodes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import func, or_, select, text

from fairpod.model.jobs import JobState
from fairpod.store import Store
from fairpod.store.records import Node
from fairpod.store.tables import ACTIVE, FINISHED_STATES, JobRow

UNFINISHED = tuple(s.value for s in JobState if not s.finished)
_STATE = {s.value: s for s in JobState}  # a dict lookup, not an Enum call per row


@dataclass(frozen=True, slots=True)
class TaskRow:
    id: int
    state: JobState
    team: str
    seq: int
    preemptions: int
    instance_type: str
    placement: list[str] = field(default_factory=list)  # read only when asked for (an instance-group filter)


def unfinished_rows(store: Store, teams: list[str] | None, placement: bool) -> list[TaskRow]:
    """Every unfinished job of ``teams`` (None: all), with its placement when ``placement``. (A select of a list
    of columns of several types: SQLAlchemy types its rows' items as ``object``, hence the casts here.)"""
    cols = [JobRow.id, JobRow.state, JobRow.team, JobRow.seq, JobRow.preemptions, JobRow.instance_type]
    q = select(*cols, JobRow.placement) if placement else select(*cols)
    q = q.where(JobRow.state.in_(UNFINISHED))
    if teams is not None:
        q = q.where(JobRow.team.in_(teams))
    with store.engine.connect() as conn:
        rows = cast("list[tuple[Any, ...]]", conn.execute(q).all())  # all at once: iterating fetches row by row
        return [TaskRow(r[0], _STATE[r[1]], r[2], r[3], r[4], r[5], list(r[6] or []) if placement else [])
                for r in rows]


@dataclass(frozen=True, slots=True)
class Unfinished:
    """How many unfinished jobs there are, per state and team, and the waiting ones that were preempted before."""

    per_team: dict[JobState, dict[str, int]]
    waiting_again: int

    def count(self, state: JobState) -> int:
        return sum(self.per_team.get(state, {}).values())


def unfinished_counts(store: Store, teams: list[str] | None) -> Unfinished:
    """Two aggregate queries: what the overview counts, from the index of the unfinished jobs by state and team
    alone (``ix_jobs_unfinished_state_team``: its condition written as the index states it, so that SQLite's
    planner takes the partial index), without reading a job's row."""
    q = select(JobRow.state, JobRow.team, func.count()).where(text(ACTIVE))
    again = select(func.count()).where(text(ACTIVE), JobRow.state == JobState.PENDING.value, JobRow.preemptions > 0)
    if teams is not None:
        q, again = q.where(JobRow.team.in_(teams)), again.where(JobRow.team.in_(teams))
    per_team: dict[JobState, dict[str, int]] = {}
    with store.engine.connect() as conn:
        for state, team, n in conn.execute(q.group_by(JobRow.state, JobRow.team)).all():
            per_team.setdefault(_STATE[state], {})[team] = int(n)
        return Unfinished(per_team, int(conn.execute(again).scalar_one()))


@dataclass(frozen=True, slots=True)
class PageRuns:
    """The (state, team) runs of unfinished jobs that one page overlaps, in the overview's order, and where the
    first of them starts in the whole order."""

    runs: list[tuple[JobState, str]]
    start: int
    offset: int
    limit: int

    def teams(self) -> list[str]:
        return sorted({team for _, team in self.runs})


def page_runs(counts: Unfinished, states: tuple[JobState, ...], offset: int, limit: int) -> PageRuns:
    """The runs of the page from ``offset``, at most ``limit`` jobs, of the jobs in ``states`` (by state as in
    ``states``, then team): worked out from the counts, no row read."""
    runs: list[tuple[JobState, str]] = []
    start = at = 0
    for state in states:
        for team, n in sorted(counts.per_team.get(state, {}).items()):
            if at + n > offset and at < offset + limit:
                if not runs:
                    start = at
                runs.append((state, team))
            at += n
    return PageRuns(runs, start, offset, limit)


def unfinished_page(store: Store, page: PageRuns, positions: dict[int, int]) -> list[int]:
    """The ids of ``page``'s jobs in the overview's order (by state, team, queue position, submission): only the
    rows of the (state, team) runs that the page overlaps are read (the first page of 100,000 waiting jobs reads
    a team or two, not all of them)."""
    rows: dict[tuple[JobState, str], list[tuple[int, int]]] = {r: [] for r in page.runs}
    with store.engine.connect() as conn:
        for state in dict.fromkeys(st for st, _ in page.runs):
            wanted = sorted({team for st, team in page.runs if st == state})
            for i in range(0, len(wanted), 500):
                q = select(JobRow.id, JobRow.seq, JobRow.team).where(JobRow.state == state.value,
                                                                     JobRow.team.in_(wanted[i:i + 500]))
                for jid, seq, team in conn.execute(q).all():
                    rows[(state, team)].append((jid, seq))
    ids: list[int] = []
    for run in page.runs:
        ids += [jid for jid, seq in sorted(rows[run], key=lambda r: (positions.get(r[0], 0), r[1]))]
    return ids[page.offset - page.start:page.offset - page.start + page.limit]


@dataclass(frozen=True, slots=True)
class RecentRow:
    id: int
    state: JobState
    submit_time: float
    first_started_at: float | None
    finished_at: float | None
    instance_type: str
    placement: list[str] = field(default_factory=list)  # read only when asked for (an instance-group filter)


def recent_rows(store: Store, since: float, until: float, teams: list[str] | None,
                placement: bool) -> list[RecentRow]:
    """The jobs of ``teams`` (None: all) submitted before ``until`` that first started or finished at ``since``
    or later: all that a window's waits, run times and finished counts read (a job that waits and never ran is
    not read: at datacenter size that is 100,000 records a request did not need)."""
    cols = [JobRow.id, JobRow.state, JobRow.submit_time, JobRow.first_started_at, JobRow.finished_at,
            JobRow.instance_type]
    q = select(*cols, JobRow.placement) if placement else select(*cols)
    q = q.where(JobRow.submit_time < until, or_(JobRow.first_started_at >= since, JobRow.finished_at >= since))
    if teams is not None:
        q = q.where(JobRow.team.in_(teams))
    with store.engine.connect() as conn:
        rows = cast("list[tuple[Any, ...]]", conn.execute(q.order_by(JobRow.seq)).all())
        return [RecentRow(r[0], _STATE[r[1]], r[2], r[3], r[4], r[5], list(r[6] or []) if placement else [])
                for r in rows]


@dataclass(frozen=True, slots=True)
class WindowFigures:
    """What the overview counts of its window, counted by the database: the jobs that finished in it by state,
    the waits of those that first started in it and the run times of those that finished in it (count, seconds in
    all), and the newest finished jobs' ids."""

    finished: dict[JobState, int]
    waited: tuple[int, float]
    ran: tuple[int, float]
    ended: list[int]


def window_figures(store: Store, since: float, until: float, teams: list[str] | None,
                   states: list[JobState] | None, ended: int) -> WindowFigures:
    """The figures of the jobs of ``teams`` (None: all) submitted before ``until`` in the window from ``since``
    (what :func:`recent_rows` gives, summed, without a row per job: at datacenter size the window holds tens of
    thousands of jobs that started or finished in it); ``ended``: how many of the finished ones in ``states``
    (None: any) to name, the newest first (by end, then submission, as a stable sort of :func:`recent_rows`)."""
    mine = [JobRow.submit_time < until]
    if teams is not None:
        mine.append(JobRow.team.in_(teams))
    shown = [v for v in FINISHED_STATES if states is None or _STATE[v] in states]
    counted = (select(JobRow.state, func.count()).where(*mine, JobRow.state.in_(FINISHED_STATES),
                                                        JobRow.finished_at >= since)
               .group_by(JobRow.state))
    waits = select(func.count(), func.sum(JobRow.first_started_at - JobRow.submit_time)).where(
        *mine, JobRow.first_started_at >= since)
    runs = select(func.count(), func.sum(JobRow.finished_at - JobRow.first_started_at)).where(
        *mine, JobRow.finished_at >= since, JobRow.first_started_at.is_not(None))
    newest = (select(JobRow.id).where(*mine, JobRow.state.in_(shown),
                                      or_(JobRow.first_started_at >= since, JobRow.finished_at >= since))
              .order_by(func.coalesce(JobRow.finished_at, 0).desc(), JobRow.seq).limit(ended))
    with store.engine.connect() as conn:
        finished = {_STATE[st]: int(n) for st, n in conn.execute(counted).all()}
        w, r = conn.execute(waits).one(), conn.execute(runs).one()
        ids = [int(i) for i in conn.execute(newest).scalars()] if ended and shown else []
    return WindowFigures(finished, (int(w[0]), float(w[1] or 0.0)), (int(r[0]), float(r[1] or 0.0)), ids)


def window_figures_of(rows: list[RecentRow], since: float, states: list[JobState] | None,
                      ended: int) -> WindowFigures:
    """:func:`window_figures` of the rows :func:`recent_rows` read (an instance group's: its jobs are known by
    their placement, which the database does not sum by)."""
    finished: dict[JobState, int] = {}
    for j in rows:
        if j.state.finished and j.finished_at is not None and j.finished_at >= since:
            finished[j.state] = finished.get(j.state, 0) + 1
    waits = [j.first_started_at - j.submit_time for j in rows
             if j.first_started_at is not None and j.first_started_at >= since]
    runs = [j.finished_at - j.first_started_at for j in rows
            if j.finished_at is not None and j.first_started_at is not None and j.finished_at >= since]
    newest = sorted((j for j in rows if j.state.finished and (states is None or j.state in states)),
                    key=lambda j: -(j.finished_at or 0))[:ended]
    return WindowFigures(finished, (len(waits), sum(waits)), (len(runs), sum(runs)), [j.id for j in newest])


@dataclass(frozen=True, slots=True)
class NodePage:
    page: list[Node]
    total: int


def node_page(store: Store, limit: int, offset: int, problems_first: bool) -> NodePage:
    """One page of the nodes: all of them in the store's order when no page is asked for (``limit`` 0, no
    offset, not ``problems_first``); else by name in natural order (pool-2 before pool-10), with
    ``problems_first`` the nodes that are not schedulable (unhealthy, cordoned) before the others. Only the
    page's nodes are read in full (the cluster page shows 500 of 10,000)."""
    if not (limit or offset or problems_first):
        nodes = store.list_nodes()
        return NodePage(nodes, len(nodes))
    keys = sorted(store.node_states(), key=lambda k: (problems_first and k[1], _natural(k[0])))
    names = [k[0] for k in (keys[offset:offset + limit] if limit else keys[offset:])]
    found = store.get_nodes(names)
    return NodePage([found[n] for n in names if n in found], len(keys))  # one removed meanwhile: left out


def _natural(name: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p)
