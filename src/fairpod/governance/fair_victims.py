"""Which running jobs fair share may stop (rule 5, ``preemption.plan``'s fair-share candidates): a team's jobs
taken the one that would lose least work first, each only while the work it loses is small beside what the
preemptor has waited, and none preempted ``FAIR_SHARE_MAX_PREEMPTIONS`` times."""

from __future__ import annotations

import math

from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload

# A job preempted this often is no longer taken for fair share (a lender's reclaim still takes it).
FAIR_SHARE_MAX_PREEMPTIONS = 2
# Fair share stops a job only if the work it loses (accelerator-seconds) is at most this fraction of what the
# preemptor has waited (seconds x its accelerators): only jobs that have just started (or just checkpointed) are
# taken. Fair share evens out waiting among borrowers, it must not destroy work to do so (a victim without
# checkpoints loses its whole run, and that lost work is what the cluster pays). This also keeps a requeued job,
# which has lost the least work, from being picked again and again.
FAIR_SHARE_WORK_RATIO = 100


def work_since(v: Workload) -> float:
    """Since when a running job's work would be lost: its last checkpoint, or its start."""
    s = v.started or 0.0
    return s if v.checkpoint is None or v.checkpoint < s else v.checkpoint


def recent_first(snap: Snapshot, itype: str, team: str, running: dict[str, Workload]) -> list[Workload]:
    """A team's running jobs on ``itype``: those without accelerators first, then the one that would lose least
    work first; sorted again only when the team's usage, a job's reported checkpoint or a start time changed
    (a forecast on a copy may set the start of a job that had none)."""
    key = ("recent", itype, team, snap.teams[team].version)
    got = snap.memo.get(key)
    if got is not None:
        order, ckpts, starts, cycle = got  # type: ignore[misc]
        if cycle == snap.cycle:
            return order  # type: ignore[no-any-return]  # checkpoints and starts change only between cycles
        if [v.checkpoint for v in order] == ckpts and [v.started for v in order] == starts:
            got[3] = snap.cycle  # type: ignore[index]
            return order  # type: ignore[no-any-return]
    order = sorted(running.values(), key=lambda v: (v.total.acc > 0, -work_since(v)))
    snap.memo[key] = [order, [v.checkpoint for v in order], [v.started for v in order],  # type: ignore[assignment]
                      snap.cycle]
    return order


def fair_gates(snap: Snapshot, itype: str, team: str, running: dict[str, Workload]
                ) -> tuple[list[Workload], list[tuple[float, float, bool]]]:
    """A team's running jobs in ``recent_first`` order, and for the first of them (``gate`` extends the list
    as far as a plan reads) what ``plan``'s fair-share test compares with the preemptor's waited
    accelerator-seconds; kept once per team, usage and cycle (``now`` is fixed within one)."""
    cycle: dict | None = snap.memo.get(("gates", snap.cycle))  # one entry per cycle
    if cycle is None:
        cycle = snap.memo[("gates", snap.cycle)] = {}  # type: ignore[assignment]
    key = (itype, team, snap.teams[team].version)
    got = cycle.get(key)
    if got is None:
        got = cycle[key] = (recent_first(snap, itype, team, running), [])
    return got  # type: ignore[no-any-return]


def gate(v: Workload, now: float) -> tuple[float, float, bool]:
    """For the fair-share test of ``v``: the work it would lose (``inf``: preempted too often to be taken), the
    bound past which it and every job after it lose too much (``-inf``: never), and whether its ``min_runtime``
    is over."""
    st = v.started
    tacc = v.total[0]
    loses = math.inf if v.preemptions >= FAIR_SHARE_MAX_PREEMPTIONS else v.lost_work(now) * tacc * FAIR_SHARE_WORK_RATIO
    stop = (now - work_since(v)) * FAIR_SHARE_WORK_RATIO if tacc > 0 else -math.inf
    return loses, stop, not (v.min_runtime and st is not None and now - st < v.min_runtime)

