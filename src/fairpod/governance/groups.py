"""The tree of groups (engine rule 2b): quotas and fair share level by level, as Kueue's hierarchical cohorts.

A group holds teams and other groups. Its quota is what it holds itself (``Group.quota``, as a Kueue Cohort's
resourceGroups: idle, shared by the teams below it before anyone outside) and the sum of its teams' and groups'
quotas below it; its ``sharing`` says
whether the subtree lends to the rest of the tree and borrows from it, and how much (borrow limit in percent of
the group's quota, absolute borrow and lending limits per instance type, as a team's):

- **Flow at every level.** What a node of the tree borrows from outside is what its children borrow beyond what
  its other children lend: idle capacity goes first to the lender's siblings, then up the tree. A group that
  does not borrow keeps its subtree within its quota; one that does not lend lends its idle capacity only inside;
  a group's borrow limit bounds what its whole subtree takes from outside. At the top, what is borrowed must be
  covered by unallocated capacity (idle resource sharing) (``flow_ok``). A job that would break this for a team
  within its own quota needs borrowed work reclaimed first, as at the top level (rule 2), through every level.
- **Quota checks at every level.** A job that takes its team over its quota is held back when a group above it may
  not borrow or has reached its borrow limit (``check``).
- **Fair share level by level.** Borrowers are ranked by their weighted dominant share at each level from the top
  down (``shares``): what each group borrows from outside divided by the lendable capacity, divided by the group's
  fair_share_weight, then the team's own share; a team of a heavy group goes first even when the team weights
  say otherwise.

A snapshot without groups never calls into this module: decisions stay as they were.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from fairpod.governance import fairshare
from fairpod.governance.lending import cap_with_absolute, idle_lendable
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Group, Team
from fairpod.governance.workload import Vec, Workload


def teams_below(snap: Snapshot, g: Group) -> list[Team]:
    """Every team of ``g``'s subtree."""
    out = [snap.teams[t] for t in g.teams]
    for c in g.children:
        out += teams_below(snap, snap.groups[c])
    return out


def _sum_below(snap: Snapshot, g: Group, vec: Callable[[Team], Sequence[int]]) -> Vec:
    """``vec`` of every team of ``g``'s subtree, summed."""
    out = [0, 0, 0]
    for t in teams_below(snap, g):
        v = vec(t)
        out = [out[0] + v[0], out[1] + v[1], out[2] + v[2]]
    return out


def own_quota(snap: Snapshot, g: Group, itype: str) -> Vec:
    """What ``g`` and the groups below it hold themselves of ``itype`` (groups' ``quota``), not their teams'."""
    got = g.quota.get(itype)
    out = [got[0], got[1], got[2]] if got is not None else [0, 0, 0]
    for c in g.children:
        v = own_quota(snap, snap.groups[c], itype)
        out = [out[0] + v[0], out[1] + v[1], out[2] + v[2]]
    return out


def quota_of(snap: Snapshot, g: Group, itype: str) -> Vec:
    """The group's quota of ``itype``: its own, and the sum of its teams' and groups' quotas below it."""
    q = _sum_below(snap, g, lambda t: t.q(itype))
    o = own_quota(snap, g, itype)
    return [q[0] + o[0], q[1] + o[1], q[2] + o[2]]


def used_of(snap: Snapshot, g: Group, itype: str) -> Vec:
    """What the group's subtree uses of ``itype`` now."""
    return _sum_below(snap, g, lambda t: t.u(itype))


def borrow_cap(g: Group, itype: str, q: Vec) -> Vec:
    """The most the group's subtree may use: quota x (1 + borrow_limit/100), at most quota + its absolute borrow
    limit, or its quota if it does not borrow."""
    if not g.borrows:
        return list(q)
    ab = g.borrow_abs.get(itype)
    if ab is not None and q[0] == 0 and q[1] == 0 and q[2] == 0:
        return [ab[0], ab[1], ab[2]]  # a subtree without quota: its absolute limit (a percent of nothing is nothing)
    k = 100 + g.borrow_limit
    return cap_with_absolute([q[0] * k // 100, q[1] * k // 100, q[2] * k // 100], q, g.borrow_abs.get(itype))


def check(snap: Snapshot, team: Team, itype: str, add: tuple[int, int, int]) -> str:
    """For a job that takes ``team`` over its own quota: the reason a group above it cannot hold it, or ""."""
    for name in team.path:
        g = snap.groups[name]
        q = quota_of(snap, g, itype)
        u = used_of(snap, g, itype)
        after = [u[0] + add[0], u[1] + add[1], u[2] + add[2]]
        if after[0] <= q[0] and after[1] <= q[1] and after[2] <= q[2]:
            continue
        if not g.borrows:
            why = "Lend" if g.lends else "DontLend"
            return (f"over quota: group {g.name} (of team {team.name}) uses {u[0]} of its {q[0]} {itype} "
                    f"accelerators, the job needs {add[0]} more and the group's sharing strategy ({why}) does not "
                    "borrow")
        cap = borrow_cap(g, itype, q)
        if after[0] > cap[0] or after[1] > cap[1] or after[2] > cap[2]:
            ab = g.borrow_abs.get(itype)
            if ab is not None and cap[0] == q[0] + ab[0] and q[0] * (100 + g.borrow_limit) // 100 > cap[0]:
                limit = f"quota {q[0]} + its absolute borrow limit {ab[0]}"
            else:
                limit = f"quota {q[0]} + {g.borrow_limit}%"
            return (f"borrow limit reached: group {g.name} (of team {team.name}) uses {u[0]} {itype} accelerators, "
                    f"the job needs {add[0]}, and {limit} allows {cap[0]}")
    return ""


def ever_fits(snap: Snapshot, team: Team, itype: str, t: tuple[int, int, int]) -> bool:
    """Could every group above ``team`` ever hold a job of ``t`` on its own?"""
    for name in team.path:
        g = snap.groups[name]
        cap = borrow_cap(g, itype, quota_of(snap, g, itype))
        if t[0] > cap[0] or t[1] > cap[1] or t[2] > cap[2]:
            return False
    return True


def _flow(snap: Snapshot, g: Group, itype: str, who: str, add: tuple[int, int, int]) -> tuple[Vec, Vec, Vec] | None:
    """(borrowed from outside, lent to outside, quota) of ``g``'s subtree with ``add`` more used by team ``who``;
    None where a level breaks its rules."""
    borrowed, lent, q = _children(snap, g.teams, g.children, itype, who, add)
    if borrowed is None:
        return None
    own = g.quota.get(itype)
    if own is not None:  # its own quota: idle, for the teams below it first
        q = [q[0] + own[0], q[1] + own[1], q[2] + own[2]]
        lent = [lent[0] + own[0], lent[1] + own[1], lent[2] + own[2]]
    b = [0, 0, 0]
    out = [0, 0, 0]
    cap = borrow_cap(g, itype, q)
    limit = g.lend_limit.get(itype)
    for d in range(3):
        need = borrowed[d] - lent[d]
        if need > 0:
            if need > cap[d] - q[d]:
                return None
            b[d] = need
        elif g.lends:
            out[d] = -need if limit is None else min(-need, limit[d])
    return b, out, q


def _children(snap: Snapshot, teams: list[str], groups: list[str], itype: str, who: str,
              add: tuple[int, int, int]) -> tuple[Vec | None, Vec, Vec]:
    borrowed = [0, 0, 0]
    lent = [0, 0, 0]
    quota = [0, 0, 0]
    for name in teams:
        t = snap.teams[name]
        q = t.q(itype)
        u = t.u(itype)
        if name == who:
            u = [u[0] + add[0], u[1] + add[1], u[2] + add[2]]
        for d in range(3):
            quota[d] += q[d]
            if u[d] > q[d]:
                borrowed[d] += u[d] - q[d]
        if t.lends:
            i = idle_lendable(q, u, t.lend_limit.get(itype))
            lent = [lent[0] + i[0], lent[1] + i[1], lent[2] + i[2]]
    for name in groups:
        got = _flow(snap, snap.groups[name], itype, who, add)
        if got is None:
            return None, lent, quota
        b, out, gq = got
        for d in range(3):
            borrowed[d] += b[d]
            lent[d] += out[d]
            quota[d] += gq[d]
    return borrowed, lent, quota


def flow_ok(snap: Snapshot, w: Workload) -> bool:
    """Would every level of the tree still cover what it borrows if ``w`` started (see the module doc)?"""
    top_teams = [t.name for t in snap.teams.values() if not t.path]
    top_groups = [g.name for g in snap.groups.values() if g.parent is None]
    t = w.total
    borrowed, lent, _ = _children(snap, top_teams, top_groups, w.itype, w.team, (t[0], t[1], t[2]))
    if borrowed is None:
        return False
    ua = snap.unallocated(w.itype) if snap.idle_sharing else [0, 0, 0]
    return all(borrowed[d] - lent[d] <= ua[d] for d in range(3))


def _share(snap: Snapshot, over: Vec, weight: int, lend: Vec) -> float:
    if over[0] <= 0 and over[1] <= 0 and over[2] <= 0:
        return 0.0
    if weight == 0:
        return math.inf
    dom = 0.0
    for o, ld in zip(over, lend, strict=True):
        if o > 0:
            dom = max(dom, o / ld) if ld > 0 else math.inf
    return dom / weight


def shares(snap: Snapshot, team: Team, itype: str, add: tuple[int, int, int]) -> list[float]:
    """The weighted dominant share after ``add`` of each group above ``team``, from the top down: what the
    group's subtree uses beyond the group's quota, over the lendable capacity, divided by its weight."""
    lend = snap.lendable(itype)
    out: list[float] = []
    for name in reversed(team.path):
        g = snap.groups[name]
        q = quota_of(snap, g, itype)
        u = used_of(snap, g, itype)
        over = [u[0] + add[0] - q[0], u[1] + add[1] - q[1], u[2] + add[2] - q[2]]
        out.append(_share(snap, over, g.weight, lend))
    return out


def own_idle(snap: Snapshot, itype: str) -> list[tuple[str, int]]:
    """The groups' own quotas of ``itype`` as lenders (``group NAME``, accelerators): always idle (teams use them by
    borrowing)."""
    out: list[tuple[str, int]] = []
    for g in snap.groups.values():
        q = g.quota.get(itype)
        if q is not None and q[0] > 0:
            out.append((f"group {g.name}", q[0]))
    return out


def lender_distance(snap: Snapshot, team: Team, lender: str) -> int:
    """``distance`` to a lender: a team, or a group's own quota (``group NAME``), which is as near as the group's
    teams are (1 for the team's own group)."""
    if not lender.startswith("group "):
        return distance(snap, team, lender)
    theirs = snap.path_of(lender[6:])
    for i, g in enumerate(team.path):
        if g in theirs:
            return i + 1
    return len(team.path) + 1


def distance(snap: Snapshot, team: Team, other: str) -> int:
    """How far up the tree from ``team`` its tree meets team ``other``'s: 1 for a sibling (the same group), 2 for a
    team of a sibling group, ...; teams not in one tree meet at the top (one more than ``team``'s depth)."""
    theirs = snap.teams[other].path
    for i, g in enumerate(team.path):
        if g in theirs:
            return i + 1
    return len(team.path) + 1


def _node_share(snap: Snapshot, team: Team, node: str | None, itype: str, delta: tuple[int, int, int]) -> float:
    """The weighted dominant share of ``team`` itself (``node`` None) or of its group ``node``, after ``delta``."""
    if node is None:
        return fairshare.share(snap, team, itype, delta)
    g = snap.groups[node]
    q, u = quota_of(snap, g, itype), used_of(snap, g, itype)
    return _share(snap, [u[0] + delta[0] - q[0], u[1] + delta[1] - q[1], u[2] + delta[2] - q[2]], g.weight,
                  snap.lendable(itype))


def _side(team: Team, common: str | None) -> str | None:
    """The node of ``team``'s path just below ``common`` (None: the team itself)."""
    path = team.path
    i = path.index(common) if common is not None else len(path)
    return path[i - 1] if i > 0 else None


def pair_shares(snap: Snapshot, a: Team, b: Team, itype: str, add: tuple[int, int, int],
                sub: tuple[int, int, int]) -> tuple[float, float]:
    """Where the paths of teams ``a`` and ``b`` part, the weighted dominant shares of the two nodes side by side
    there: ``a``'s after it uses ``add`` more, ``b``'s after it uses ``sub`` less (fair-share preemption, rule 5,
    level by level: the same test as between two teams, so no two jobs preempt each other back and forth)."""
    common = next((g for g in a.path if g in b.path), None)
    return (_node_share(snap, a, _side(a, common), itype, add),
            _node_share(snap, b, _side(b, common), itype, (-sub[0], -sub[1], -sub[2])))
