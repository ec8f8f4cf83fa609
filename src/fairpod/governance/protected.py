"""Jobs that run within their team's quota only: protected jobs (rule 7) and a service's minimum (quota-bound).

A job preempted ``PROTECTED_AFTER`` times that fits its team's quota runs only while the team's protected jobs, it
included, fit within that quota (``harboured``), so a reclaim, which takes a team's work only while the team
borrows and its unprotected jobs first (``ordering``), never reaches it again. A service's minimum never borrows.
``team_check`` is the cycle's team check with both rules applied: a function of the snapshot, so ``explain`` shows
exactly what the cycle checks.
"""

from __future__ import annotations

from fairpod.governance import quota
from fairpod.governance.ordering import PROTECTED_AFTER
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Team
from fairpod.governance.workload import Workload


def entitled(team: Team, w: Workload) -> bool:
    """Does ``w`` fit within its team's quota on its own (once the team's other jobs have ended)?"""
    q = team.q(w.itype)
    t = w.total
    return t[0] <= q[0] and t[1] <= q[1] and t[2] <= q[2]


def is_protected(team: Team, w: Workload) -> bool:
    """Rule 7: a job preempted ``PROTECTED_AFTER`` times that fits its team's quota runs only while the team's
    protected jobs, it included, fit within that quota (``harboured``); one that needs more than the quota may
    still borrow, and goes last among the victims (``ordering``)."""
    return w.preemptions >= PROTECTED_AFTER and entitled(team, w)


def protected_use(snap: Snapshot, team: Team, itype: str) -> tuple[int, int, int]:
    """What the team's running protected jobs hold of ``itype``; once per usage of the team."""
    key = ("protected", itype, team.name, team.version)
    got: tuple[int, int, int] | None = snap.memo.get(key)
    if got is None:
        a = c = m = 0
        for v in snap.running_by.get((itype, team.name), {}).values():
            if v.preemptions >= PROTECTED_AFTER:
                t = v.total
                a, c, m = a + t[0], c + t[1], m + t[2]
        got = snap.memo[key] = (a, c, m)
    return got


def harboured(snap: Snapshot, team: Team, w: Workload) -> bool:
    """Rule 7: would the team's running protected jobs and the protected ``w`` fit within the team's quota? Then
    ``w`` may start even by borrowing: a reclaim takes a team's jobs only while the team uses more than its
    quota, and its unprotected jobs first (``ordering``), so it stops before it reaches a protected one (the
    unprotected jobs hold at least what the team borrows)."""
    q = team.q(w.itype)
    r = protected_use(snap, team, w.itype)
    t = w.total
    return r[0] + t[0] <= q[0] and r[1] + t[1] <= q[1] and r[2] + t[2] <= q[2]


def within_or_undo(snap: Snapshot, w: Workload, plan: tuple[list[tuple[Workload, str]], list[str]],
                    ) -> tuple[list[tuple[Workload, str]], list[str]] | None:
    """Keep a preemption plan for a protected job only if the job then runs within its team's quota."""
    if quota.within_quota(snap.teams[w.team], w.itype, w.total):
        return plan
    for v, _ in plan[0]:
        snap.assign(v, v.nodes or [])
    return None


def team_check(snap: Snapshot, w: Workload, lifted: dict[tuple, bool] | None = None,
               checked: tuple[bool, bool, str] | None = None) -> tuple[bool, bool, str]:
    """``quota.team_check`` (or what it said: ``checked``), except that a quota-bound job (a service's minimum)
    and a protected job (rule 7) do not borrow: (may hold, within quota, reason if not). The cycle's check, and
    ``explain``'s."""
    ok, within, why = checked if checked is not None else quota.team_check(snap, w, lifted)
    if ok and not within and w.quota_bound:
        return False, False, (
            f"waiting for room within team {w.team}'s quota: a service's minimum replicas run only within "
            "its team's quota, never on borrowed capacity (so a reclaim never takes it below its minimum)")
    team = snap.teams[w.team]
    if ok and not within and is_protected(team, w) and not harboured(snap, team, w):
        return False, False, (
            f"waiting for room within team {w.team}'s quota: preempted {w.preemptions} times, the job runs only "
            "while the team's protected jobs fit within its quota (so it is not reclaimed again)")
    return ok, within, why

