"""Which of a team's own running jobs a pending job of the team may stop (rule 4): those of lower priority
(``preempt_team_tasks: LowerPriority``), and with ``LowerOrNewerEqualPriority`` (opt-in, Kueue's
``withinClusterQueue: LowerOrNewerEqualPriority``) also those of equal priority submitted after it, so a job is not
starved by newer jobs of its own priority that took the team's quota first. A job stopped so waits behind the older
one it made room for, and never stops it in turn (it is newer), so two jobs never preempt each other back and forth.
"""

from __future__ import annotations

from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Team
from fairpod.governance.workload import Workload


def outranks(snap: Snapshot, team: Team, w: Workload, v: Workload) -> bool:
    """May ``w`` stop ``v``, a running job of its own team, by priority? A job that started with a boost from
    priority aging (``aging``) keeps it while it runs; the waiting job's own boost does not count."""
    vp = v.priority + snap.boosts.get(v.id, 0) if snap.boosts else v.priority
    if vp < w.priority:
        return True
    return team.preempt_newer and vp == w.priority and (v.submit, v.seq) > (w.submit, w.seq)
