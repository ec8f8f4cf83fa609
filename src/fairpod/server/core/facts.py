"""The engine's facts about one job or one node, as a turn publishes them after its commit, so that the reads of
one job or node at a time (a get-job's queue position, a running borrower's lenders now, a job's topology, the
jobs on a node) never wait for a turn and never see one half done.

:meth:`fairpod.server.core.door.Door.engine_facts` hands a read's function a :class:`Facts`: when the core's lock
is free, the live snapshot under the lock, taken without waiting (:class:`LiveFacts`: as of the last turn and the
commands since); while a turn or a command holds it, the facts the last turn published at its end (at most one
turn old, :class:`AsOf` says which). A turn publishes them whole (:meth:`Facts.publish`), not per key read
lately as :mod:`fairpod.server.core.published` does, because a read of one job or node must not wait for a first
publication: they are copies made in C (a team's queue's entries and ids) and kept from the last turn where
nothing changed (a team's queue whose ``changes`` count is the same, a node not in the snapshot's ``touched``), so
a turn spends milliseconds on them (benchmarks/README.md, "Reads that never wait for a turn"). The fair-share history and the
budgets' hours counted so far go with them: a spec's dry run builds its snapshots from the store and these
(``core.memory.Memory.trial_snapshots``), never from the core's live memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from typing import Any, NamedTuple

from fairpod.governance import history
from fairpod.governance.nodes import Node
from fairpod.governance.quota import lending
from fairpod.governance.snapshot import Snapshot
from fairpod.server.core.published import AsOf


class NodeFacts(NamedTuple):
    """A node as the engine holds it: accelerators, free ones, its jobs (engine id, team) by id, its domains."""

    accelerators: int
    free: int
    jobs: tuple[tuple[str, str | None], ...]
    topo: tuple[str, ...]


def node_facts(snap: Snapshot, n: Node) -> NodeFacts:
    return NodeFacts(n.cap[0], n.free[0],
                     tuple(sorted((j, w.team if (w := snap.running.get(j)) is not None else None) for j in n.jobs)),
                     n.topo)


def _position(entries: Iterable[tuple[tuple, str]], live: Any, wid: str) -> int | None:
    """``PendingQueue.position`` over a queue's entries and live ids (copies, or the queue's own)."""
    if wid not in live:
        return None
    entries = list(entries)
    mine = min((e for e in entries if e[1] == wid), default=None)
    if mine is None:
        return None
    return 1 + len({e[1] for e in entries if e < mine and e[1] != wid and e[1] in live})


def _positions(entries: Iterable[tuple[tuple, str]], live: Any) -> dict[str, int]:
    """Every job's place in a queue (``PendingQueue.in_order``'s order, 1 is next) by engine id."""
    out: dict[str, int] = {}
    for _, wid in sorted(e for e in entries if e[1] in live):
        if wid not in out:
            out[wid] = len(out) + 1
    return out


class Facts:
    """The facts one turn published (see the module's doc); never changed once published."""

    def __init__(self, as_of: AsOf, queues: dict[str, tuple[tuple[tuple[tuple, str], ...], dict[str, Any], Any, int]],
                 nodes: dict[str, NodeFacts], lenders: dict[str, dict[str, dict[str, int]]],
                 fair_share: dict[str, Any] | None, budget_used: dict[Any, Any] | None) -> None:
        self.as_of = as_of
        self._queues = queues  # team -> (its heaps' entries, its queue's jobs by id, the queue, its changes count)
        self._nodes = nodes  # name -> its facts
        self._lenders = lenders  # instance type -> quota.lending
        self._fair_share = fair_share
        self._budget_used = budget_used
        self._of: tuple[Snapshot, int] | None = None  # the snapshot and its version they were published of

    @classmethod
    def publish(cls, snap: Snapshot, as_of: AsOf, last: Facts | None, budget_used: dict[Any, Any] | None) -> Facts:
        """The facts of ``snap`` now (the core's end of turn, under its lock); ``last``: the ones they replace,
        whose copies of what did not change since are kept (a team's queue while its ``changes`` count is the
        same; every node not in the snapshot's ``touched``, which this empties)."""
        same = last is not None and last._of is not None and last._of[0] is snap
        old_queues = last._queues if same and last is not None else {}
        queues = {}
        for name, t in snap.teams.items():
            q = t.queue
            was = old_queues.get(name)
            queues[name] = was if was is not None and was[2] is q and was[3] == q.changes else (
                tuple(chain.from_iterable(q.heaps.values())), q.live.copy(), q, q.changes)
        if same and last is not None:
            nodes = last._nodes.copy()
            for name in snap.touched:
                n = snap.nodes.get(name)
                if n is None:
                    nodes.pop(name, None)
                else:
                    nodes[name] = node_facts(snap, n)
        else:
            nodes = {name: node_facts(snap, n) for name, n in snap.nodes.items()}
        snap.touched.clear()
        if same and last is not None and last._of is not None and last._of[1] == snap.version:
            lenders = last._lenders  # no usage or node changed since
        else:
            lenders = {it: lending(snap, it) if p.over[0] > 0 else {} for it, p in snap.pools.items()}
        fair = history.dump(snap) if snap.history_half_life is not None else None
        facts = cls(as_of, queues, nodes, lenders, fair, budget_used)
        facts._of = (snap, snap.version)
        return facts

    def position(self, team: str, wid: str) -> int | None:
        """The 1-based place of engine job ``wid`` in ``team``'s queue; None if not queued."""
        q = self._queues.get(team)
        return None if q is None else _position(q[0], q[1], wid)

    def positions(self, team: str) -> dict[str, int]:
        """The place of every job in ``team``'s queue by engine id (the dashboard's page of one or two teams)."""
        q = self._queues.get(team)
        return {} if q is None else _positions(q[0], q[1])

    def teams(self) -> list[str]:
        """The teams whose queues these facts hold."""
        return list(self._queues)

    def lending(self, itype: str) -> dict[str, dict[str, int]]:
        """``quota.lending``: who borrows how many accelerators of ``itype`` from whom (do not change it)."""
        return self._lenders.get(itype, {})

    def node(self, name: str) -> NodeFacts | None:
        return self._nodes.get(name)

    def fair_share(self) -> dict[str, Any] | None:
        """The fair-share history (``governance.history.dump``; None: not kept)."""
        return self._fair_share

    def budget_used(self) -> dict[Any, Any] | None:
        """The budget meter's hours counted so far (``BudgetKeeper.meter.used``; None: no budgets)."""
        return self._budget_used


class LiveFacts(Facts):
    """The same facts read from the live snapshot: only under the core's lock."""

    def __init__(self, snap: Snapshot, as_of: AsOf, budget_used: dict[Any, Any] | None,
                 published: Facts | None = None) -> None:
        super().__init__(as_of, {}, {}, {}, None, budget_used)
        self._snap = snap
        self._published = published  # the last turn's: their lenders while no usage changed since

    def position(self, team: str, wid: str) -> int | None:
        t = self._snap.teams.get(team)
        return None if t is None else t.queue.position(wid)

    def positions(self, team: str) -> dict[str, int]:
        t = self._snap.teams.get(team)
        return {} if t is None else _positions(chain.from_iterable(t.queue.heaps.values()), t.queue.live)

    def teams(self) -> list[str]:
        return list(self._snap.teams)

    def lending(self, itype: str) -> dict[str, dict[str, int]]:
        p = self._published  # a page of running borrowers asks once each: O(teams) under the lock, unless
        if p is not None and p._of is not None and p._of[0] is self._snap and p._of[1] == self._snap.version:
            return p.lending(itype)
        return lending(self._snap, itype)

    def node(self, name: str) -> NodeFacts | None:
        n = self._snap.nodes.get(name)
        return None if n is None else node_facts(self._snap, n)

    def fair_share(self) -> dict[str, Any] | None:
        return history.dump(self._snap) if self._snap.history_half_life is not None else None

    def budget_used(self) -> dict[Any, Any] | None:
        return None if self._budget_used is None else dict(self._budget_used)
