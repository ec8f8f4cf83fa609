"""Preemption before borrowing across a job's instance types (opt-in: ``policy.fallback_when_can_borrow:
PreemptionOverBorrowing``; Kueue's ``flavorFungibility.preference: PreemptionOverBorrowing`` with ``whenCanBorrow`` and
``whenCanPreempt: TryNextFlavor``).

A job with fallback instance types (``Workload.choices``) starts on the first type it fits now within its team's quota;
with ``TryNextInstanceType`` the first type it fits by borrowing comes next. With ``PreemptionOverBorrowing``, before
borrowing, each type where the job would run *within* its team's quota once some jobs stop (its team's lower-priority
jobs, or borrowed work reclaimed) is tried in order: Kueue's order (fit, no borrowing) -> (preempt, no borrowing) ->
(fit, borrowing) -> (preempt, borrowing). The job's reason names the types passed over.
"""

from __future__ import annotations

from typing import Protocol

from fairpod.governance import preemption
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload

WORDS = "policy.fallback_when_can_borrow: PreemptionOverBorrowing"


class _Cycle(Protocol):
    """What this rule uses of a scheduling cycle (``scheduler._Cycle``)."""

    snap: Snapshot
    holders: set[str]
    passed: str

    def rank_deferred(self) -> None: ...

    def reserved_for(self, w: Workload, within: bool) -> dict[str, str]: ...

    def admit(self, w: Workload, nodes: list[str], within: bool, victims: list[tuple[Workload, str]]) -> None: ...


def preempt_within(cyc: _Cycle, w: Workload, why: list[str]) -> bool:
    """Start ``w`` on the first of its types where it runs within its team's quota once a preemption plan's victims
    stop; ``why``: why each type was passed over so far (one entry per type). False (``w`` on its first type again
    where none does) leaves the cluster as it was."""
    snap = cyc.snap
    holder = w.id if w.id in cyc.holders else None
    cyc.rank_deferred()  # other teams' jobs may be stopped from here on
    team = snap.teams[w.team]
    for i in range(len(w.choices)):
        w.choose(i)
        q, t = team.q(w.itype), w.total
        if t[0] > q[0] or t[1] > q[1] or t[2] > q[2] or w.id in snap.cost_held:
            continue  # never within the team's quota of this type (or its reclaim is held back, rule 3b)
        plan = preemption.plan(snap, w, True, cyc.reserved_for(w, True), holder, within_after=True)
        if plan is not None:
            victims, nodes = plan
            cyc.passed = "; ".join(why[:i]) + ("; " if i else "") + f"preempting within quota before borrowing ({WORDS})"
            cyc.admit(w, nodes, True, victims)
            return True
    w.choose(0)
    return False
