"""Pages for the dashboard at datacenter size (``benchmarks/datacenter.py``): the unfinished jobs as light rows,
read in one query without building a job record each (the task overview counts and orders every unfinished job,
100,000 in a datacenter, but reads in full only the page it shows), and a page of the nodes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sqlalchemy import select

from fairpod.model.jobs import JobState
from fairpod.store import Store
from fairpod.store.records import Node
from fairpod.store.tables import JobRow

UNFINISHED = tuple(s.value for s in JobState if not s.finished)


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
    """Every unfinished job of ``teams`` (None: all), with its placement when ``placement``."""
    cols = [JobRow.id, JobRow.state, JobRow.team, JobRow.seq, JobRow.preemptions, JobRow.instance_type]
    q = select(*cols, JobRow.placement) if placement else select(*cols)
    q = q.where(JobRow.state.in_(UNFINISHED))
    if teams is not None:
        q = q.where(JobRow.team.in_(teams))
    with store.engine.connect() as conn:
        return [TaskRow(r[0], JobState(r[1]), r[2], r[3], r[4], r[5], list(r[6] or []) if placement else [])
                for r in conn.execute(q)]


@dataclass(frozen=True, slots=True)
class NodePage:
    page: list[Node]
    total: int


def node_page(nodes: list[Node], limit: int, offset: int, problems_first: bool) -> NodePage:
    """One page of ``nodes``: all of them in the store's order when no page is asked for (``limit`` 0, no
    offset, not ``problems_first``); else by name in natural order (pool-2 before pool-10), with
    ``problems_first`` the nodes that are not schedulable (unhealthy, cordoned) before the others."""
    if limit or offset or problems_first:
        nodes = sorted(nodes, key=lambda n: (problems_first and n.schedulable, _natural(n.name)))
    return NodePage(nodes[offset:offset + limit] if limit else nodes[offset:], len(nodes))


def _natural(name: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name) if p)
