"""Rule 3b: a reclaim whose victims would lose much work waits a while (``policy.preemption_cost_wait_seconds``),
for room to free by itself; the jobs held back so are kept on the snapshot (``Snapshot.cost_held``)."""

from __future__ import annotations

from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload

# Rule 3b holds a reclaim back only for a team that already runs at least this share of its quota of the type: a
# team that lends most of its quota gets it back at once. On the three contended ITP replays (docs/simulator.md)
# without it the lender cluster10 waited 36-107 s on average (rho up to 1.002) and cluster01 of the third spec
# reached rho 1.024; with 1/2 cluster10 waits 16-49 s (rho <= 1.0007) and no team's rho passes 1.001; 3/4 kept
# cluster10 at rho 1.000 but gave up 0.5-0.7 points of utilization on two specs.
COSTLY_FROM_USAGE = 0.5


def costly(snap: Snapshot, w: Workload, removed: list[tuple[Workload, str]]) -> bool:
    """Rule 3b: is this reclaim held back? Its victims of other teams would lose at least 2 x ``cost_wait``
    seconds of work per accelerator of ``w`` (a wait of ``cost_wait`` costs ``w`` less than half of it), ``w`` has
    waited less than ``cost_wait``, and its team already runs ``COSTLY_FROM_USAGE`` of its quota. Then ``w`` waits
    for room to free by itself (``snap.cost_held``)."""
    acc = w.total[0]
    if acc <= 0 or snap.now - w.waiting_since() >= snap.cost_wait:
        return False
    team = snap.teams[w.team]
    if team.u(w.itype)[0] < COSTLY_FROM_USAGE * team.q(w.itype)[0]:
        return False  # it lends most of its quota: it gets it back at once
    destroyed = 0.0
    for v, kind in removed:
        if kind == "reclaim":
            destroyed += v.lost_work(snap.now) * v.total[0]
    if destroyed < 2.0 * snap.cost_wait * acc:
        return False
    until = w.waiting_since() + snap.cost_wait
    snap.cost_held[w.id] = (until, destroyed)
    snap.retry_at = min(snap.retry_at, until)
    return True


def held_reason(snap: Snapshot, w: Workload) -> str:
    """Why a job whose reclaim is held back (``costly``) waits."""
    return (f"waiting for reclaim: the borrowed jobs it would stop would lose "
            f"{snap.cost_held[w.id][1] / 3600:.1f} accelerator-hours of work, so it waits up to "
            f"{snap.cost_wait / 60:.0f} min in the queue for room to free by itself before they are stopped "
            "(policy preemption_cost_wait_seconds)")

