"""Why: the figures behind the engine's choices, read from a snapshot without changing it (``fairpod explain``).

- ``levels``: a team's standing on an instance type at each level of the tree of groups, from the top down to the
  team itself: weight, quota, in use, borrowed (use beyond quota) and weighted dominant share (rule 5, 2b).
- ``next_idle``: who gets the next idle capacity of an instance type: every team's first waiting job on it, in the
  order the engine offers them (``offers.Offers.rank``), and the rule that puts the first before the second.
- ``holds``: whether a waiting job's team may hold it now, and what holds it back (the engine's own check: quota,
  borrow limit, budget, a service's minimum that never borrows, a protected job).
- ``compare``: why team X gets more than team Y: both teams' levels, where their paths part, and the rule that
  decides between them there.
"""

from __future__ import annotations

from typing import Any

from fairpod.governance import fairshare, groups, users
from fairpod.governance.offers import offer_rank
from fairpod.governance.protected import team_check
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Team
from fairpod.governance.workload import Workload


def _share_text(s: float) -> float | None:
    return None if s == float("inf") else round(s, 6)


def levels(snap: Snapshot, team: Team, itype: str) -> list[dict[str, Any]]:
    """The team's standing at each level from the top: groups above it, then the team."""
    shares = groups.shares(snap, team, itype, (0, 0, 0)) if team.path else []
    out: list[dict[str, Any]] = []
    for k, name in enumerate(reversed(team.path)):
        g = snap.groups[name]
        q, u = groups.quota_of(snap, g, itype), groups.used_of(snap, g, itype)
        out.append({"level": "group", "name": name, "weight": g.weight, "quota": q[0], "in_use": u[0],
                    "borrowed": max(0, u[0] - q[0]), "share": _share_text(shares[k]),
                    "siblings": _siblings(snap, g.parent, name)})
    tq, tu = team.q(itype), team.u(itype)
    out.append({"level": "team", "name": team.name, "weight": team.weight, "quota": tq[0], "in_use": tu[0],
                "borrowed": max(0, tu[0] - tq[0]), "share": _share_text(fairshare.share(snap, team, itype)),
                "history": round(team.history.get(itype, 0.0), 6) if snap.history_half_life else None,
                "siblings": _siblings(snap, team.path[0] if team.path else None, team.name)})
    return out


def _siblings(snap: Snapshot, parent: str | None, me: str) -> list[str]:
    """The teams and groups beside ``me`` under ``parent`` (None: the top)."""
    if parent is None:
        names = [t.name for t in snap.teams.values() if not t.path] + [
            g.name for g in snap.groups.values() if g.parent is None]
    else:
        g = snap.groups[parent]
        names = list(g.teams) + list(g.children)
    return sorted(n for n in names if n != me)


RULES = ("rule 2: a job within its team's quota goes before any that borrows",
         "rule 5: the lower weighted dominant share after admission goes first",
         "rule 4: the higher priority goes first",
         "the earlier submitted job goes first",
         "the job queued first goes first")


def _rule(a: tuple, b: tuple, snap: Snapshot) -> str:
    """The rule that orders offer rank ``a`` before ``b`` (``offers.Offers._rank``)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x == y:
            continue
        if i == 1 and not snap.fair_share:
            return "FirstComeFirstServe: the earliest job goes first"
        if i == 1 and isinstance(x, tuple):
            for k, (p, q) in enumerate(zip(x, y, strict=False)):
                if p != q:
                    where = "the team's own level" if k == len(x) - 1 else f"level {k + 1} of the tree of groups"
                    return f"rule 5 (2b): the lower weighted dominant share after admission at {where} goes first"
        return RULES[min(i, len(RULES) - 1)]
    return "a tie: team name order"


def next_idle(snap: Snapshot, itype: str) -> list[dict[str, Any]]:
    """Every team's first waiting job on ``itype`` in the order the engine offers them, each with the rule that
    puts it after the one before. The engine tries them in this order; the first that fits gets idle capacity."""
    offers: list[tuple[tuple, str, Workload]] = []
    for t in snap.teams.values():
        if not t.queue:
            continue
        h = t.queue.head(set(), users.order(t))
        if h is None or h.itype != itype:
            continue
        offers.append((offer_rank(snap, t, h), t.name, h))
    offers.sort(key=lambda o: (o[0], o[1]))
    out: list[dict[str, Any]] = []
    for i, (rank, name, w) in enumerate(offers):
        team = snap.teams[name]
        ok, within, why = team_check(snap, w)
        out.append({"team": name, "job": w.id, "accelerators": w.total.acc, "within_quota": within,
                    "may_hold": ok, "why_not": why or None,
                    "share_after": [_share_text(s) for s in rank[1]] if isinstance(rank[1], tuple)
                    else _share_text(rank[1]),
                    "rule": "first" if i == 0 else _rule(offers[i - 1][0], rank, snap),
                    "in_use": team.u(itype)[0], "quota": team.q(itype)[0]})
    return out


def holds(snap: Snapshot, w: Workload) -> dict[str, Any]:
    """Whether ``w``'s team may hold it now (``protected.team_check``, as the cycle asks), and why not."""
    ok, within, why = team_check(snap, w)
    return {"within_quota": within, "may_hold": ok, "quota_bound": w.quota_bound, "why_not": why or None}


def compare(snap: Snapshot, a: str, b: str, itype: str) -> dict[str, Any]:
    """Why team ``a`` gets more (or less) of ``itype`` than team ``b``."""
    ta, tb = snap.teams[a], snap.teams[b]
    la, lb = levels(snap, ta, itype), levels(snap, tb, itype)
    common = [g for g in ta.path if g in tb.path]
    meet = common[0] if common else None
    k = len(common)  # la[:k] and lb[:k] are the groups they share; la[k] and lb[k] stand side by side
    pa, pb = la[k], lb[k]
    lines = [f"{a} and {b} meet at " + (f"group {meet}" if meet else "the top of the tree") +
             f"; there {pa['level']} {pa['name']} (weight {pa['weight']}) stands against {pb['level']} {pb['name']} "
             f"(weight {pb['weight']})"]
    for x, y, name in ((la[-1], lb[-1], "in use"),):
        lines.append(f"{a} has {x['in_use']} {itype} accelerators {name} of a quota of {x['quota']}, {b} has "
                     f"{y['in_use']} of {y['quota']}")
    if snap.fair_share:
        sa, sb = pa["share"], pb["share"]
        ha = "infinite" if sa is None else f"{sa:.4f}"
        hb = "infinite" if sb is None else f"{sb:.4f}"
        lines.append(f"idle capacity goes by the weighted dominant share at that level (borrowed / lendable "
                     f"capacity / weight): {pa['name']} {ha}, {pb['name']} {hb}; the lower borrows next "
                     "(a job within its team's quota always goes first)")
    else:
        lines.append("idle capacity goes first come first serve (policy.idle_compute_allocation)")
    return {"instance_type": itype, "teams": {a: la, b: lb}, "meet": meet, "explanation": lines,
            "next_idle": next_idle(snap, itype)}
