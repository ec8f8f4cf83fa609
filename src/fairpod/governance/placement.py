"""Gang placement (engine rule 1): all replicas of a job on distinct schedulable nodes, or none.

Best fit: each replica goes to the fitting node with the least room left, so that whole nodes stay free
for large jobs. Among equal fits, nodes that passed their deep health check come first, then by name.
"""

from __future__ import annotations

import heapq
from itertools import islice

from fairpod.governance import topology
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload


def place(snap: Snapshot, w: Workload, reserved: dict[str, str] | None = None) -> list[str] | None:
    """Node names for the replicas of ``w`` (one each), or None if the gang does not fit now.

    ``reserved`` maps node name to the job it is held for; other jobs may not use it. Nodes are taken in
    best-fit order, (free accelerators, not deep-check-passed, free mCPU, free MiB, name), from the
    snapshot's fit index, so a placement looks at the fitting nodes only, not at every node. In a cluster
    with topology levels, ``fairpod.governance.topology`` chooses instead (domains first, then nodes).
    """
    r = w.req
    n = w.n
    pf = snap.pool(w.itype).free
    if r.acc * n > pf[0] or r.mcpu * n > pf[1] or r.mib * n > pf[2]:
        return None
    if snap.levels or w.topology_required:
        return topology.place(snap, w, reserved)
    a, c, m = r
    buckets = snap.fit_index.get(w.itype, {})
    fits: list[str] = []
    popped: list[tuple[list, tuple]] = []
    try:
        for b in sorted(k for k in buckets if k >= a):
            h = buckets[b]
            while h:
                e = heapq.heappop(h)
                nd = snap.nodes.get(e[3])
                if nd is None or nd.stamp != e[4] or nd.free[0] != b:
                    continue  # stale: the node changed since (its current entry is elsewhere)
                if e[0] != (not nd.health_passed):
                    snap.index(nd, compact=False)  # its health changed since it was entered: re-enter it in order
                    continue
                popped.append((h, e))
                if (nd.free[1] >= c and nd.free[2] >= m and nd.schedulable
                        and (nd.health_passed or not w.passed_only)
                        and (not reserved or reserved.get(nd.name, w.id) == w.id)):
                    fits.append(nd.name)
                    if len(fits) == n:
                        return fits
        return None
    finally:
        for h, e in popped:
            heapq.heappush(h, e)


def never_fits(snap: Snapshot, w: Workload) -> str | None:
    """Why ``w`` cannot run on the healthy nodes even when they are all idle, or None if it could."""
    ok = (nd for nd in snap.by_type.get(w.itype, ()) if nd.schedulable and (nd.health_passed or not w.passed_only))
    lv = topology.level_of(snap, w)
    required = lv is not None and lv[1]
    nodes = list(ok) if required else None  # no required level: only the count matters, up to ``w.n`` nodes
    count = len(nodes) if nodes is not None else sum(1 for _ in islice(ok, w.n))
    kind = "healthy " + ("deep-check-passed " if w.passed_only else "")
    if not count:
        return f"no {kind}{w.itype} node"
    if count < w.n:
        return f"needs {w.n} {kind}{w.itype} nodes, the cluster has {count}"
    return None if nodes is None else topology.never_fits(snap, w, nodes)


def why_not(snap: Snapshot, w: Workload) -> str:
    """A readable reason why ``w`` cannot be placed now."""
    return never_fits(snap, w) or topology.why_not(snap, w) or (
        f"waiting for capacity: fewer than {w.n} {w.itype} nodes have {w.req.acc} free accelerators each"
    )
