"""Budgets over time (``fairpod.governance.budget``): the control plane's count of each budgeted team's
accelerator-hours in the current period.

``BudgetKeeper.apply(cp)`` runs in every reconcile turn before the engine's cycle (under the lock): it counts
the usage held since the last turn into a ``governance.budget.Meter`` and writes (hours used, budget, hard cap)
into the snapshot's teams. A budget the meter has not seen (after a restart, or when one is added) is first
counted from the usage of its period so far (``server.rollups.integrals``), so budgets survive restarts
without state of their own; from then on the meter adds what the snapshot holds, turn by turn.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from fairpod.governance.budget import WARN, Meter, period_start
from fairpod.governance.build import budget_meter
from fairpod.model.spec import ClusterSpec
from fairpod.server.core.state import CoreState
from fairpod.store import StoreError
from fairpod.store.usage import TEAM

log = logging.getLogger("fairpod.budgets")


class BudgetKeeper:
    def __init__(self) -> None:
        self.meter: Meter | None = None
        self.spec: ClusterSpec | None = None

    def apply(self, cp: CoreState) -> None:
        spec = cp.spec
        if not any(t.budgets for t in spec.teams):
            self.meter, self.spec = None, spec
            return
        if self.meter is None or self.spec is not spec:  # the spec changed: keep what is counted of kept budgets
            old = self.meter
            self.meter, self.spec = budget_meter(spec), spec
            if old is not None:  # a budget whose period changed is counted again from the samples
                self.meter.used = {k: v for k, v in old.used.items()
                                   if k in self.meter.budgets and old.budgets[k][0] == self.meter.budgets[k][0]}
        now = cp.clock()
        for key, start in self.meter.unseen(now):
            self.meter.seed(key, start, self._from_samples(cp, key, start, now), now)
        self.meter.accrue(cp.snap.teams, now)

    def fill(self, snap_teams: dict[str, Any], spec: ClusterSpec, now: float,
             used: dict[Any, Any] | None) -> None:
        """Write the hours counted so far (``used``: the meter's, or a copy of them) into freshly built engine
        teams (a rebuild, or a dry run of another spec): a budget of the same team, type and period keeps its
        count; another starts at what is known."""
        if used is None:
            return
        for t in spec.teams:
            team = snap_teams.get(t.name)
            for b in t.budgets:
                got = used.get((t.name, b.instance_type))
                same = got is not None and got[0] == period_start(b.period, now)
                if team is not None:
                    team.budget[b.instance_type] = ((got[1] if same and got else 0.0) / 3600.0,
                                                    b.accelerator_hours, b.hard_cap)

    @staticmethod
    def _from_samples(cp: CoreState, key: tuple[str, str], start: float, now: float) -> float:
        if now <= start:
            return 0.0
        try:
            ints = cp.queries.integrals([start, now], now)  # the period's buckets, and the samples for the rest
        except (StoreError, SQLAlchemyError) as e:
            log.warning("budget of %s on %s counted from now only: %s", key[0], key[1], e)
            return 0.0
        return ints.series.get((TEAM, key[0], key[1]), {}).get("acc", [0.0])[0]

    def rows(self, cp: CoreState, teams: list[str] | None = None) -> list[dict[str, Any]]:
        """Every budget now: team, instance type, period and its start, hours used, the budget, the state."""
        out: list[dict[str, Any]] = []
        now = cp.clock()
        for t in cp.spec.teams:
            if teams is not None and t.name not in teams:
                continue
            for b in t.budgets:
                eng = cp.snap.teams.get(t.name)
                used = eng.budget.get(b.instance_type, (0.0,))[0] if eng is not None else 0.0
                ratio = used / b.accelerator_hours
                state = ("held" if b.hard_cap else "no borrowing") if ratio >= 1 else (
                    "lowest priority" if ratio >= WARN else "ok")
                out.append({"team": t.name, "instance_type": b.instance_type, "period": b.period,
                            "period_start": period_start(b.period, now), "used_hours": round(used, 4),
                            "accelerator_hours": b.accelerator_hours, "used_ratio": round(ratio, 4),
                            "hard_cap": b.hard_cap, "state": state})
        return out
