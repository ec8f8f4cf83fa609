"""Fair share of idle capacity (engine rule 5).

A team's share of an instance type is its weighted dominant share: for each resource, what it borrows
divided by the lendable capacity; the largest of these, divided by the team's fair_share_weight. A team
that borrows nothing has share 0; a team of weight 0 that borrows has an infinite share, so it comes last
when teams compete and is the first to give back. Teams competing for idle capacity are ranked by the share
each would have after admitting its job, so weight decides from the first borrowed unit. Under FairShareHistory the ranking and the victim order add
each team's decayed past borrowing (``governance.history``); whether a fair-share preemption is allowed stays
on the shares now.
"""

from __future__ import annotations

import math

from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Team


def share(snap: Snapshot, team: Team, itype: str, delta: tuple[int, int, int] = (0, 0, 0),
          with_history: bool = False, lend: list[int] | None = None) -> float:
    """The team's weighted dominant share of ``itype`` if its usage changed by ``delta``; ``with_history``
    (FairShareHistory, ``governance.history``): plus its decayed past borrowed share, before the weight.
    ``lend``: ``snap.lendable(itype)`` when the caller has it already."""
    q = team.q(itype)
    u = team.u(itype)
    o0, o1, o2 = u[0] + delta[0] - q[0], u[1] + delta[1] - q[1], u[2] + delta[2] - q[2]
    if o0 <= 0 and o1 <= 0 and o2 <= 0:
        return 0.0  # borrows nothing
    if lend is None:
        lend = snap.lendable(itype)
    dom = 0.0
    for over, ld in ((o0, lend[0]), (o1, lend[1]), (o2, lend[2])):
        if over > 0:
            if ld > 0:
                dom = max(dom, over / ld)
            else:
                dom = math.inf
    if with_history and snap.history_half_life is not None:
        dom += team.history.get(itype, 0.0)
    if team.weight == 0:
        return math.inf
    return dom / team.weight


def may_preempt(preemptor_after: float, victim_after: float) -> bool:
    """Preempt for fair share only if the preemptor's share after admission stays at or below the victim
    team's share after the removal, so two jobs can never preempt each other back and forth."""
    if preemptor_after == math.inf:
        return False
    return preemptor_after <= victim_after
