"""Budgets over time (engine rule 10; a team's ``budgets``): accelerator-hours per period and instance type.

The caller tells the engine, per team and instance type, the accelerator-hours used in the current period, the
budget and whether it is a hard cap (``Team.budget``; the control plane and the simulator count the hours).
- **Past 80 %**: the team's jobs of that type count as the lowest priority against other teams' jobs: they
  are ranked after jobs of other priorities when teams compete (rule 5's order), and picked first among equal
  victims (ordering rule 3). Within the team the order stays as it was.
- **Past 100 %**: the team may not borrow that type: a job that would go above its quota waits.
- **Past 100 % with a hard cap**: no job of the team starts on that type (running ones go on).

Periods are UTC calendar days, ISO weeks (from Monday) and calendar months; ``period_start`` says where the
one holding ``t`` (unix seconds) began, for whoever counts the hours.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fairpod.governance.teams import Team
from fairpod.governance.workload import Workload

WARN = 0.8  # past this share of the budget the team's jobs count as the lowest priority
LOWEST = -2  # below every class and below a job without one (-1)


def period_start(period: str, t: float) -> float:
    """Unix time at which the ``day`` / ``week`` / ``month`` holding ``t`` began (UTC)."""
    day = int(t // 86400)
    if period == "day":
        return day * 86400.0
    if period == "week":
        return (day - (day + 3) % 7) * 86400.0  # 1970-01-01 was a Thursday
    if period == "month":
        d = datetime.fromtimestamp(t, UTC)
        return datetime(d.year, d.month, 1, tzinfo=UTC).timestamp()
    raise ValueError(f"unknown budget period {period!r} (day, week, month)")


def next_period(period: str, t: float) -> float:
    """Unix time at which the period after the one holding ``t`` begins."""
    start = period_start(period, t)
    return period_start(period, start + {"day": 1.5, "week": 7.5, "month": 32.0}[period] * 86400)


def ratio(team: Team, itype: str) -> float | None:
    """Used / budget of the team's budget on ``itype`` (None: no budget)."""
    b = team.budget.get(itype)
    if b is None:
        return None
    used, hours, _ = b
    return used / hours if hours > 0 else float("inf")


def demoted(team: Team, itype: str) -> bool:
    r = ratio(team, itype)
    return r is not None and r >= WARN


def priority(team: Team, w: Workload) -> int:
    """The priority ``w`` counts with against other teams' jobs: the lowest once its team is past 80 %."""
    return LOWEST if demoted(team, w.itype) else w.priority


def blocks(team: Team, w: Workload, borrows: bool) -> str | None:
    """Why the team's budget keeps ``w`` from starting now (``borrows``: it would go above the quota), or None."""
    r = ratio(team, w.itype)
    if r is None or r < 1.0:
        return None
    used, hours, hard = team.budget[w.itype]
    spent = f"team {team.name} used {used:.1f} of its {hours:g} {w.itype} accelerator-hours this period"
    if hard:
        return f"budget hard cap: {spent}; its jobs wait for the next period"
    if borrows:
        return f"budget spent: {spent}, so it may not borrow"
    return None


class Meter:
    """Counts each budgeted team's accelerator-seconds per instance type in the current period, from the
    snapshot's usage between calls, and writes (hours used, budget, hard cap) into the snapshot's teams.

    ``budgets``: {(team, instance type): (period, accelerator-hours, hard cap)}. A budget is counted from the
    first call that sees it; ``seed`` sets what its period used before (the control plane reads that from its
    usage samples after a restart). Pure: it reads the time it is given only.
    """

    def __init__(self, budgets: dict[tuple[str, str], tuple[str, float, bool]]) -> None:
        self.budgets = budgets
        # key -> (period start, accelerator-seconds in it, counted up to)
        self.used: dict[tuple[str, str], tuple[float, float, float]] = {}

    def unseen(self, now: float) -> list[tuple[tuple[str, str], float]]:
        """The budgets this meter has not counted yet: (key, start of the current period)."""
        return [(key, period_start(period, now)) for key, (period, _, _) in self.budgets.items()
                if key not in self.used]

    def seed(self, key: tuple[str, str], start: float, acc_seconds: float, at: float) -> None:
        """The period from ``start`` used ``acc_seconds`` up to ``at``; counting goes on from there."""
        self.used[key] = (start, acc_seconds, at)

    def accrue(self, snap_teams: dict[str, Team], now: float) -> None:
        """Add each budget's usage held since it was last counted (the teams' usage now, unchanged since then;
        a new period counts from its start) and write every budgeted team's (hours used, budget, hard cap)."""
        for key, (period, hours, hard) in self.budgets.items():
            team = snap_teams.get(key[0])
            if team is None:
                continue
            start = period_start(period, now)
            p0, secs, last = self.used.get(key, (start, 0.0, now))
            if p0 != start:  # a new period began since: only the time since its start counts
                secs = 0.0
            if now > last:
                secs += team.u(key[1])[0] * (now - max(last, start))
            self.used[key] = (start, secs, max(last, now))
            team.budget[key[1]] = (secs / 3600.0, hours, hard)
