"""The order in which running jobs are picked as preemption victims (engine rules 3 and 7).

Among the candidates of one preemption, a job is picked before another when, in this order:
  1. it belongs to another team that is borrowing (borrowed work goes before the team's own jobs);
  2. its team's fair share is higher (only when competing for idle capacity under FairShare);
  3. its priority is lower (a team past 80 % of its budget counts as the lowest, rule 10);
  4. it loses less work: less time since its last reported checkpoint (or since its start);
  5. it started more recently;
  6. it was submitted later;
  7. its id sorts first (so the choice is deterministic).
Each rule is one element of the sort key below, in the same order.
"""

from __future__ import annotations

from collections.abc import Callable

from fairpod.governance.snapshot import Workload


def victim_key(
    preemptor_team: str, now: float, team_share: Callable[[str], float],
    priority: Callable[[Workload], int] | None = None,
) -> Callable[[Workload], tuple]:
    """``priority``: the priority a job counts with (a team past 80 % of its budget: the lowest, rule 10)."""

    def key(v: Workload) -> tuple:
        return (
            v.team == preemptor_team,  # 1
            -team_share(v.team),  # 2
            priority(v) if priority is not None else v.priority,  # 3
            v.lost_work(now),  # 4
            -(v.started or 0.0),  # 5
            -v.seq,  # 6
            v.id,  # 7
        )

    return key
