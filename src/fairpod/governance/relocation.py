"""Moving one replica of a running job to another node: its own was lost or taken out of service (a node fault,
a cordon, a reboot asked for) while the job may restart a replica in place (``restarts_in_place``, recovery from
peers). The other replicas keep their processes; only the lost one starts again, elsewhere.

The job's admission does not change: the replica keeps its instance type and its request, so its team's usage,
what it borrows and what others lend stay as they are; only which node holds that replica's request moves. So
the new node is, of the nodes of the job's instance type (the same flavor):

- one that takes new work (schedulable; deep-health-check-passed when the job asks for that) and runs no other
  replica of the job (a gang's replicas run on distinct nodes, rule 1);
- with room for one replica's request (accelerators, mCPU, MiB) now;
- with a topology level (``governance.topology``): required, in the domain of that level where the job's other
  replicas run (a job placed in one rack stays in it); preferred (or implied), there first;
- among those, the engine's best fit (fewest free accelerators first, ... ``topology.node_key``), as a replica
  of a growing elastic job is placed.

No such node: the caller restarts the job whole, as it did before (:func:`replacement` says why). Pure, as the
engine is: it reads and changes the snapshot only.
"""

from __future__ import annotations

from fairpod.governance import topology
from fairpod.governance.nodes import Node
from fairpod.governance.snapshot import Snapshot


def replacement(snap: Snapshot, wid: str, rank: int) -> tuple[str | None, str]:
    """(the node for replica ``rank`` of the running job ``wid``, "") or (None, why there is none)."""
    w = snap.running.get(wid)
    if w is None or not w.nodes or not 0 <= rank < len(w.nodes):
        return None, f"job {wid} has no replica {rank} running"
    old = w.nodes[rank]
    others = [n for i, n in enumerate(w.nodes) if i != rank]
    taken = set(w.nodes)
    a, c, m = w.req
    kind = "deep-check-passed " if w.passed_only else ""
    ok: list[Node] = [nd for nd in snap.by_type.get(w.itype, ())
                      if nd.name not in taken and nd.schedulable and (nd.health_passed or not w.passed_only)]
    if not ok:
        return None, f"no other schedulable {kind}{w.itype} node"
    fits = [nd for nd in ok if nd.free[0] >= a and nd.free[1] >= c and nd.free[2] >= m]
    if not fits:
        return None, (f"no other schedulable {kind}{w.itype} node has room for the replica ({a} accelerators, "
                      f"{c} mCPU, {m} MiB): {len(ok)} without it")
    lv = topology.level_of(snap, w)
    if lv is None or lv[0] < 0:
        return min(fits, key=topology.node_key).name, ""
    level, required = lv
    used = {snap.nodes[n].topo[level] for n in others if n in snap.nodes}
    if not others and old in snap.nodes:
        used = {snap.nodes[old].topo[level]}  # a job of one replica: near where it ran if it can, else anywhere
    if required and others:
        near = [nd for nd in fits if nd.topo[level] in used]
        if not near:
            return None, (f"no {w.itype} node with room in {' or '.join(sorted(used))}, the "
                          f"{snap.levels[level]} its replicas must share")
        return min(near, key=topology.node_key).name, ""
    return min(fits, key=lambda nd: (nd.topo[level] not in used, topology.node_key(nd))).name, ""


def move(snap: Snapshot, wid: str, rank: int, node: str) -> str:
    """Replica ``rank`` of the running job ``wid`` holds ``node`` from now on; returns the node it left."""
    return snap.move_replica(snap.running[wid], rank, node)
