"""Pages for the dashboard at datacenter size (``benchmarks/datacenter.py``): the unfinished jobs as light rows,
read in one query without building a job record each (the task overview counts and orders every unfinished job,
100,000 in a datacenter, but reads in full only the page it shows), the jobs that started or finished in the
overview's window as light rows too (its averages and counts), and a page of the nodes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import func, or_, select

from fairpod.model.jobs import JobState
from fairpod.store import Store
from fairpod.store.records import Node
from fairpod.store.tables import JobRow

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
    """Two aggregate queries: what the overview counts, without reading a row per unfinished job."""
    q = select(JobRow.state, JobRow.team, func.count()).where(JobRow.state.in_(UNFINISHED))
    again = select(func.count()).where(JobRow.state == JobState.PENDING.value, JobRow.preemptions > 0)
    if teams is not None:
        q, again = q.where(JobRow.team.in_(teams)), again.where(JobRow.team.in_(teams))
    per_team: dict[JobState, dict[str, int]] = {}
    with store.engine.connect() as conn:
        for state, team, n in conn.execute(q.group_by(JobRow.state, JobRow.team)).all():
            per_team.setdefault(_STATE[state], {})[team] = int(n)
        return Unfinished(per_team, int(conn.execute(again).scalar_one()))


def unfinished_page(store: Store, counts: Unfinished, states: tuple[JobState, ...], positions: dict[int, int],
                    offset: int, limit: int) -> list[int]:
    """The ids of the unfinished jobs in ``states`` from ``offset``, at most ``limit``, in the overview's order (by
    state as in ``states``, team, queue position, submission): only the rows of the (state, team) runs that the
    page overlaps are read (the first page of 100,000 waiting jobs reads a team or two, not all of them)."""
    runs: list[tuple[JobState, str]] = []
    start = at = 0
    for state in states:
        for team, n in sorted(counts.per_team.get(state, {}).items()):
            if at + n > offset and at < offset + limit:
                if not runs:
                    start = at
                runs.append((state, team))
            at += n
    rows: dict[tuple[JobState, str], list[tuple[int, int]]] = {r: [] for r in runs}
    with store.engine.connect() as conn:
        for state in states:
            wanted = sorted({team for st, team in runs if st == state})
            for i in range(0, len(wanted), 500):
                q = select(JobRow.id, JobRow.seq, JobRow.team).where(JobRow.state == state.value,
                                                                     JobRow.team.in_(wanted[i:i + 500]))
                for jid, seq, team in conn.execute(q).all():
                    rows[(state, team)].append((jid, seq))
    ids: list[int] = []
    for run in runs:
        ids += [jid for jid, seq in sorted(rows[run], key=lambda r: (positions.get(r[0], 0), r[1]))]
    return ids[offset - start:offset - start + limit]


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
