"""The snapshot's nodes (``NodeIndex``, the base of ``Snapshot``): each node's free room (``Node``), the capacity
summed per instance type (``Pool``), and the indexes placement and the starvation guard read instead of every
node: the fit index (best fit by free room and health) and the nodes by free accelerators. ``version`` and
``nodes_version`` count the changes that readers cache against."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from fairpod.governance.workload import Vec
from fairpod.model.resources import Res


@dataclass(slots=True, eq=False)
class Node:
    name: str
    itype: str
    cap: Res
    free: Vec
    schedulable: bool = True
    health_passed: bool = False  # deep health check Passed
    jobs: set[str] = field(default_factory=set)
    stamp: int = 0  # bumped when its free room changes: older entries of it in the fit index are stale
    bucket: int = -1  # its free accelerators when last indexed (its set in ``Snapshot.by_free``)
    topo: tuple[str, ...] = ()  # its domain at each topology level, outermost first ("b1", "b1/r3"; see topology)


@dataclass(slots=True, eq=False)
class Pool:
    """Per instance type: capacity and what the sharing rules need, summed over teams."""

    cap: Vec = field(default_factory=lambda: [0, 0, 0])  # schedulable nodes
    free: Vec = field(default_factory=lambda: [0, 0, 0])  # free on schedulable nodes
    quota_all: Vec = field(default_factory=lambda: [0, 0, 0])
    quota_lend: Vec = field(default_factory=lambda: [0, 0, 0])  # quota of lenders, each up to its lending limit
    idle_lend: Vec = field(default_factory=lambda: [0, 0, 0])  # sum over lenders of what each lends now
    over: Vec = field(default_factory=lambda: [0, 0, 0])  # sum of max(0, used - quota) over all teams
    reserved_borrow: Vec = field(default_factory=lambda: [0, 0, 0])  # held back for a starving borrower


class NodeIndex:
    """Nodes, their per-type sums and indexes (see the module doc)."""

    def __init__(self, topology_levels: tuple[str, ...] = ()) -> None:
        self.levels = tuple(topology_levels)  # the topology's levels, outermost first (e.g. block, rack)
        self.nodes: dict[str, Node] = {}
        self.by_type: dict[str, list[Node]] = {}
        self.unschedulable: set[str] = set()  # names of nodes that take no new replicas
        # per instance type and free accelerators: a heap of (not passed, free mcpu, free mib, name, stamp), so
        # placement finds the best fit without looking at every node (stale entries are dropped lazily)
        self.fit_index: dict[str, dict[int, list[tuple[bool, int, int, str, int]]]] = {}
        self._index_size: dict[str, int] = {}
        # per instance type and count of free accelerators: the names of the nodes with that many free (kept with
        # the fit index), so the nodes with at least k free (or the nearest to it) are found without looking at the
        # others
        self.by_free: dict[str, dict[int, set[str]]] = {}
        self.pools: dict[str, Pool] = {}
        # counts changes of the nodes alone (added, removed, schedulable, health, topology): what
        # ``placement.never_fits`` reads; ``scheduler`` keeps its verdicts per job shape while it stays
        self.nodes_version = 0
        self.version = 0  # counts changes of usage (assign, unassign) and of nodes, so readers can cache derived views
        # names of the nodes changed (room, jobs, health, topology, added, removed) since the control plane last
        # published its facts of them (fairpod.server.core.facts, which empties it): what it computes again
        self.touched: set[str] = set()

    def pool(self, itype: str) -> Pool:
        p = self.pools.get(itype)
        if p is None:
            p = self.pools[itype] = Pool()
        return p

    def add_node(self, name: str, itype: str, cap: Res, *, schedulable: bool = True, passed: bool = False,
                 topology: tuple[str, ...] = ()) -> Node:
        """Add a node; ``topology`` is its domain name at each of ``levels`` ("" where unknown)."""
        if name in self.nodes:
            raise ValueError(f"node {name!r} already exists")
        n = Node(name, itype, cap, list(cap), schedulable, passed, topo=domain_ids(name, topology, len(self.levels)))
        self.version += 1
        self.nodes_version += 1
        self.nodes[name] = n
        self.by_type.setdefault(itype, []).append(n)
        self.index(n)
        if schedulable:
            add(self.pool(itype).cap, cap, 1)
            add(self.pool(itype).free, cap, 1)
        else:
            self.unschedulable.add(name)
        return n

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        n = self.nodes[name]
        if n.schedulable != schedulable:
            self.version += 1
            self.nodes_version += 1
            n.schedulable = schedulable
            if schedulable:
                self.unschedulable.discard(name)
            else:
                self.unschedulable.add(name)
            add(self.pool(n.itype).cap, n.cap, 1 if schedulable else -1)
            add(self.pool(n.itype).free, n.free, 1 if schedulable else -1)

    def remove_node(self, name: str) -> None:
        n = self.nodes[name]
        if n.jobs:
            raise ValueError(f"node {name!r} still runs {sorted(n.jobs)}")
        self.set_schedulable(name, False)
        self.version += 1
        self.nodes_version += 1
        del self.nodes[name]
        self.touched.add(name)
        self.unschedulable.discard(name)
        self._unbucket(n)
        self.by_type[n.itype].remove(n)

    def update_node(self, name: str, *, passed: bool, topology: tuple[str, ...] | None = None) -> None:
        """A node's deep health check result changed (``passed``), or its topology labels (``topology``: its
        domain name at each level)."""
        n = self.nodes[name]
        topo = n.topo if topology is None else domain_ids(name, topology, len(self.levels))
        if n.health_passed != passed or n.topo != topo:
            self.version += 1
            self.nodes_version += 1
            n.health_passed = passed
            n.topo = topo
            self.index(n)

    def index(self, n: Node, *, compact: bool = True) -> None:
        """(Re-)enter node ``n`` in the fit index with its current free room and health."""
        n.stamp += 1
        self.touched.add(n.name)
        f = n.free
        if n.bucket != f[0]:
            self._unbucket(n)
            buckets = self.by_free.get(n.itype)
            if buckets is None:
                buckets = self.by_free[n.itype] = {}
            names = buckets.get(f[0])
            if names is None:
                names = buckets[f[0]] = set()
            names.add(n.name)
            n.bucket = f[0]
        heapq.heappush(self.fit_index.setdefault(n.itype, {}).setdefault(f[0], []),
                       (not n.health_passed, f[1], f[2], n.name, n.stamp))
        size = self._index_size[n.itype] = self._index_size.get(n.itype, 0) + 1
        if compact and size > 4 * len(self.by_type[n.itype]) + 64:
            self.fit_index[n.itype] = {}
            self._index_size[n.itype] = 0
            for nd in self.by_type[n.itype]:
                self.index(nd)

    def _unbucket(self, n: Node) -> None:
        if n.bucket >= 0:
            buckets = self.by_free[n.itype]
            names = buckets[n.bucket]
            names.discard(n.name)
            if not names:
                del buckets[n.bucket]
            n.bucket = -1

    def with_free(self, itype: str, at_least: int) -> list[set[str]]:
        """The sets of names of the nodes of ``itype`` with at least ``at_least`` free accelerators."""
        return [names for b, names in self.by_free.get(itype, {}).items() if b >= at_least]

    def unallocated(self, itype: str) -> Vec:
        p = self.pool(itype)
        return [max(0, p.cap[d] - p.quota_all[d]) for d in range(3)]


def domain_ids(node: str, values: tuple[str, ...], levels: int) -> tuple[str, ...]:
    """A node's domain id at each level: the path of domain names down to it ("b1", "b1/r3"). A node with no
    name at some level is a domain of its own from there down ("b1/?node"; it shares that domain with no other
    node)."""
    out: list[str] = []
    path = ""
    own = False
    for i in range(levels):
        v = values[i] if i < len(values) else ""
        if not own:
            own = not v
            step = f"?{node}" if own else v
            path = f"{path}/{step}" if path else step
        out.append(path)
    return tuple(out)


def add(v: Vec, r: Sequence[int], k: int) -> None:
    v[0] += k * r[0]
    v[1] += k * r[1]
    v[2] += k * r[2]
