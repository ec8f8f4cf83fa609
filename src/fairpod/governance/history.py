"""Decayed-usage fair share (engine rule 5b, ``idle_compute_allocation: FairShareHistory``).

Under FairShareHistory each team keeps, per instance type, a *history*: the exponentially decayed mean of its
dominant borrowed share (what ``fairshare`` computes before dividing by the weight: borrowed / lendable, the
largest over the resources) with half-life ``policy.fair_share_half_life_seconds``. A team that borrowed half
of the lendable capacity for a long time has a history near 0.5; one half-life after it stopped, 0.25.

Borrowers are ranked (scheduler rule 5) and borrowed jobs are picked as victims (ordering rule 2) by
(share now + history) / weight, so a team that borrowed a lot yesterday yields today. Whether a fair-share
preemption is allowed at all is still decided on the shares now (``fairshare.may_preempt``), so the history
can reorder who gets idle capacity next but never makes two jobs preempt each other back and forth.

The engine folds time in at the start of each cycle: the shares recorded at the end of the previous cycle
held from then to ``snap.now`` (the snapshot does not change between cycles but by jobs ending, which the
next cycle sees), so the fold is exact for the simulator and deterministic: it reads ``snap.now`` only.
``dump``/``load`` turn the history into plain data for the control plane to keep across restarts.
"""

from __future__ import annotations

import math
from typing import Any

from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Team


def borrowed_share(snap: Snapshot, team: Team, itype: str) -> float:
    """The team's dominant borrowed share of ``itype`` now, unweighted (0 when it borrows nothing)."""
    q = team.q(itype)
    u = team.u(itype)
    lend = snap.lendable(itype)
    dom = 0.0
    for d in range(3):
        over = u[d] - q[d]
        if over > 0:
            dom = max(dom, over / lend[d] if lend[d] > 0 else 1.0)
    return dom


def advance(snap: Snapshot) -> None:
    """Fold the time from the last cycle to ``snap.now`` into every team's history (see the module doc)."""
    half = snap.history_half_life
    if half is None:
        return
    last = snap.history_at
    snap.history_at = snap.now
    if last is None or snap.now <= last:
        return
    keep = math.exp(-math.log(2) * (snap.now - last) / half)
    for team in snap.teams.values():
        rates = snap.history_rate.get(team.name, {})
        for itype in set(team.history) | set(rates):
            h = team.history.get(itype, 0.0) * keep + rates.get(itype, 0.0) * (1.0 - keep)
            if h < 1e-9:
                team.history.pop(itype, None)
            else:
                team.history[itype] = h


def record(snap: Snapshot) -> None:
    """Remember the shares after this cycle's decisions: they hold until the next cycle."""
    if snap.history_half_life is None:
        return
    rates: dict[str, dict[str, float]] = {}
    for team in snap.teams.values():
        for itype in team.used:
            s = borrowed_share(snap, team, itype)
            if s > 0:
                rates.setdefault(team.name, {})[itype] = s
    snap.history_rate = rates
    if snap.history_at is None:
        snap.history_at = snap.now


def dump(snap: Snapshot) -> dict[str, Any]:
    """The history as plain data (JSON): when it was last folded, each team's history, the shares since."""
    return {"at": snap.history_at,
            "history": {t.name: dict(sorted(t.history.items())) for t in snap.teams.values() if t.history},
            "rates": snap.history_rate}


def load(snap: Snapshot, data: dict[str, Any] | None) -> None:
    """Take a history ``dump`` made earlier (teams no longer in the snapshot are dropped). Bad data is ignored
    as a whole: the history then starts empty, never half read."""
    if not data or snap.history_half_life is None:
        return
    try:
        at = data.get("at")
        hist = {str(t): {str(k): float(v) for k, v in h.items()} for t, h in data.get("history", {}).items()}
        rates = {str(t): {str(k): float(v) for k, v in r.items()} for t, r in data.get("rates", {}).items()}
        at = None if at is None else float(at)
    except (AttributeError, TypeError, ValueError):
        return
    if any(not math.isfinite(v) or v < 0 for h in (*hist.values(), *rates.values()) for v in h.values()):
        return
    for name, h in hist.items():
        if name in snap.teams:
            snap.teams[name].history = h
    snap.history_rate = {t: r for t, r in rates.items() if t in snap.teams}
    snap.history_at = at
