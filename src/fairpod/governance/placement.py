"""Gang placement (engine rule 1): all replicas of a job on distinct schedulable nodes, or none.

Best fit: each replica goes to the fitting node with the least room left, so that whole nodes stay free
for large jobs. Among equal fits, nodes that passed their deep health check come first, then by name.
"""

from __future__ import annotations

from fairpod.governance.snapshot import Snapshot, Workload


def place(snap: Snapshot, w: Workload, reserved: dict[str, str] | None = None) -> list[str] | None:
    """Node names for the replicas of ``w`` (one each), or None if the gang does not fit now.

    ``reserved`` maps node name to the job it is held for; other jobs may not use it.
    """
    r = w.req
    n = w.n
    pf = snap.pool(w.itype).free
    if r.acc * n > pf[0] or r.mcpu * n > pf[1] or r.mib * n > pf[2]:
        return None
    a, c, m = r
    fits = []
    for nd in snap.by_type.get(w.itype, ()):
        f = nd.free
        if f[0] >= a and f[1] >= c and f[2] >= m and nd.schedulable:
            if w.passed_only and not nd.health_passed:
                continue
            if reserved and reserved.get(nd.name, w.id) != w.id:
                continue
            fits.append(nd)
    if len(fits) < n:
        return None
    if n == 1:
        best = min(fits, key=lambda nd: (nd.free[0], not nd.health_passed, nd.free[1], nd.free[2], nd.name))
        return [best.name]
    fits.sort(key=lambda nd: (nd.free[0], not nd.health_passed, nd.free[1], nd.free[2], nd.name))
    return [nd.name for nd in fits[:n]]


def never_fits(snap: Snapshot, w: Workload) -> str | None:
    """Why ``w`` cannot run on the healthy nodes even when they are all idle, or None if it could."""
    ok = [nd for nd in snap.by_type.get(w.itype, ()) if nd.schedulable and (nd.health_passed or not w.passed_only)]
    kind = "healthy " + ("deep-check-passed " if w.passed_only else "")
    if not ok:
        return f"no {kind}{w.itype} node"
    if len(ok) < w.n:
        return f"needs {w.n} {kind}{w.itype} nodes, the cluster has {len(ok)}"
    return None


def why_not(snap: Snapshot, w: Workload) -> str:
    """A readable reason why ``w`` cannot be placed now."""
    return never_fits(snap, w) or (
        f"waiting for capacity: fewer than {w.n} {w.itype} nodes have {w.req.acc} free accelerators each"
    )
