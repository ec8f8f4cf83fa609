"""Preempting to borrow by priority (rule 5c, opt-in: ``policy.preempt_to_borrow: LowerPriority``; Kueue's
``borrowWithinCohort`` with ``maxPriorityThreshold``).

Without it a job that must borrow takes only idle lendable capacity, and under FairShare stops other teams' borrowed
jobs for fair share (rule 5). With it, under FirstComeFirstServe (Kueue's classic preemption; the spec refuses it
under FairShare, as Kueue does), a job J of team T that T may hold by borrowing (its quota, borrow limit and groups
allow it) and that no other plan makes fit may stop:

- jobs of *other teams that borrow* J's instance type, of lower priority than J and at most
  ``policy.preempt_to_borrow_max_priority`` (none: any lower priority); a team's job is taken only while the team
  still borrows (a team never goes below its quota for it);
- and T's own lower-priority jobs where T may preempt them (TaskRanking, ``preempt_team_tasks: LowerPriority``);

in the victim order (other teams' borrowed work first, lowest priority, least lost work), until J fits, then every
victim not needed is given back. A borrowed job above the threshold is still reclaimed by a team that needs its
quota back (rule 3): the threshold bounds only what a *borrowing* job may stop, as Kueue's does. Jobs inside their
``min_runtime_seconds`` are never taken. The victims read ``preempted by higher-priority job J of team T, which
borrows (policy.preempt_to_borrow)``.
"""

from __future__ import annotations

from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload


def applies(snap: Snapshot) -> bool:
    """Is the rule on (``policy.preempt_to_borrow: LowerPriority``) and the policy classic (no fair share)?"""
    return snap.borrow_preempt and not snap.fair_share


def takes(snap: Snapshot, w: Workload, v: Workload) -> bool:
    """May the borrowing job ``w`` stop ``v``, a job of another team, by priority?"""
    if v.priority >= w.priority:
        return False
    cap = snap.borrow_preempt_max
    return cap is None or v.priority <= cap


def reason(w: Workload) -> str:
    """What a job stopped by this rule reads."""
    return f"preempted by higher-priority job {w.id} of team {w.team}, which borrows (policy.preempt_to_borrow)"
