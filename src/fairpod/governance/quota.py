"""Quota arithmetic: may a team hold a job (quota, borrow limit, strategy), and is there idle capacity to lend.

Rules (engine rule 2 and 3):
- A job whose team's usage stays within its quota is *within quota*; the team is entitled to it.
- Otherwise only a LendAndBorrow team may take it, *borrowing*: usage may reach quota x (1 + borrow_limit/100),
  and at most quota + its absolute borrow limit on that instance type if it has one (``lending``, rule 2a).
- All borrowing together (sum over teams of usage above quota) must stay within what lending teams
  (LendAndBorrow, Lend) leave idle, each at most its lending limit (rule 2a), plus unallocated capacity when
  idle resource sharing is Enabled.
  A within-quota job that would break this needs borrowed work reclaimed first.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence

from fairpod.governance import budget, groups, within_team
from fairpod.governance.lending import cap_with_absolute, idle_lendable, lend_quota
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Team
from fairpod.governance.workload import Vec, Workload


def within_quota(team: Team, itype: str, add: Vec | tuple) -> bool:
    q = team.q(itype)
    u = team.u(itype)
    return u[0] + add[0] <= q[0] and u[1] + add[1] <= q[1] and u[2] + add[2] <= q[2]


def borrow_cap(team: Team, itype: str) -> Vec:
    """The most a team may use of an instance type: quota x (1 + borrow_limit/100), at most quota + its absolute
    borrow limit, or quota if it cannot borrow."""
    q = team.q(itype)
    if not team.borrows:
        return list(q)
    ab = team.borrow_abs.get(itype)
    if ab is not None and q[0] == 0 and q[1] == 0 and q[2] == 0:
        return [ab[0], ab[1], ab[2]]  # a team that only borrows: its absolute limit (a percent of nothing is nothing)
    k = 100 + team.borrow_limit
    return cap_with_absolute([q[0] * k // 100, q[1] * k // 100, q[2] * k // 100], q, ab)


def team_check(snap: Snapshot, w: Workload, lifted: dict[tuple, bool] | None = None) -> tuple[bool, bool, str]:
    """(may hold, within quota, reason if not) for job ``w`` of its team, ignoring everyone else. ``lifted``: a
    cache of ``_limit_lifted`` that the caller keeps while nodes and queues change only with ``snap.version``
    (within one scheduling cycle)."""
    team = snap.teams[w.team]
    t = w.total
    if team.budget:
        held = budget.blocks(team, w, not within_quota(team, w.itype, t))
        if held:
            return False, False, held
    if within_quota(team, w.itype, t):
        return True, True, ""
    u = team.u(w.itype)
    q = team.q(w.itype)
    if not team.borrows:
        why = "Lend" if team.lends else "DontLend"
        return False, False, (
            f"over quota: team {team.name} uses {u[0]} of its {q[0]} {w.itype} accelerators, the job needs "
            f"{t.acc} more and the team's sharing strategy ({why}) does not borrow"
        )
    cap = borrow_cap(team, w.itype)
    if (u[0] + t[0] > cap[0] or u[1] + t[1] > cap[1] or u[2] + t[2] > cap[2]) and not _lifted(snap, w, lifted):
        if q[0] == 0 and q[1] == 0 and team.borrow_abs.get(w.itype) is None:
            return False, False, f"over quota: team {team.name} has no quota on {w.itype}, so it cannot borrow any"
        ab = team.borrow_abs.get(w.itype)
        if ab is not None and cap[0] == q[0] + ab[0] and q[0] * (100 + team.borrow_limit) // 100 > cap[0]:
            return False, False, (
                f"borrow limit reached: team {team.name} uses {u[0]} {w.itype} accelerators, the job needs {t.acc}, "
                f"and quota {q[0]} + its absolute borrow limit {ab[0]} allows {cap[0]}"
            )
        return False, False, (
            f"borrow limit reached: team {team.name} uses {u[0]} {w.itype} accelerators, the job needs {t.acc}, "
            f"and quota {q[0]} + {team.borrow_limit}% allows {cap[0]}"
        )
    if team.path:
        why = groups.check(snap, team, w.itype, (t[0], t[1], t[2]))
        if why:
            return False, False, why
    return True, False, ""


def _lifted(snap: Snapshot, w: Workload, memo: dict[tuple, bool] | None) -> bool:
    if memo is None:
        return _limit_lifted(snap, w)
    key = (w.team, w.itype, w.total, snap.version)
    got = memo.get(key)
    if got is None:
        got = memo[key] = _limit_lifted(snap, w)
    return got


def _limit_lifted(snap: Snapshot, w: Workload) -> bool:
    """``borrow_limit_applies: WhileOthersWait``: does no other team wait with a job on ``w``'s instance type that
    it may run now (within its quota or its own borrow limit) and could ever run? Then ``w``'s team may borrow
    past its limit. A team without quota there borrows nothing either way, and a job larger than the limit on
    its own never runs (as with ``Always``)."""
    if not snap.borrow_limit_while_others_wait:
        return False
    team = snap.teams[w.team]
    q = team.q(w.itype)
    if q[0] == 0 and q[1] == 0:
        return False
    cap, t = borrow_cap(team, w.itype), w.total
    if t[0] > cap[0] or t[1] > cap[1] or t[2] > cap[2]:
        return False
    for other in snap.teams.values():
        if other is team or not other.queue:
            continue
        for j in other.queue.heads():
            if j.itype != w.itype:
                continue
            t = j.total
            if (within_quota(other, j.itype, t) or other.borrows and all(
                    a + b <= c for a, b, c in zip(other.u(j.itype), t, borrow_cap(other, j.itype), strict=True))
                    ) and ever_fits_quota(snap, j):
                return False
    return True


def _contrib(team: Team, itype: str, q: tuple, u0: int, u1: int, u2: int) -> tuple[int, int, int, int, int, int]:
    o0, o1, o2 = max(0, u0 - q[0]), max(0, u1 - q[1]), max(0, u2 - q[2])
    if team.lends:
        i0, i1, i2 = idle_lendable(q, (u0, u1, u2), team.lend_limit.get(itype))
    else:
        i0 = i1 = i2 = 0
    return o0, o1, o2, i0, i1, i2


def pool_ok(snap: Snapshot, w: Workload, holder: str | None = None) -> bool:
    """Would all borrowing still be covered by lendable idle capacity after ``w`` starts?

    ``holder`` names the job for which borrowable capacity was held back (starvation guard); no other job
    may borrow that, but every team may still use its own quota.
    """
    team = snap.teams[w.team]
    p = snap.pool(w.itype)
    q = team.q(w.itype)
    u = team.u(w.itype)
    t = w.total
    a = _contrib(team, w.itype, q, u[0], u[1], u[2])
    b = _contrib(team, w.itype, q, u[0] + t[0], u[1] + t[1], u[2] + t[2])
    ua: Sequence[int] = snap.unallocated(w.itype) if snap.idle_sharing else (0, 0, 0)
    # capacity held for a starving borrower is held out of what is lendable: it stops other borrowing, never
    # a team's use of its own quota
    borrows = b[0] > a[0] or b[1] > a[1] or b[2] > a[2]
    rb = p.reserved_borrow if holder != w.id and borrows else (0, 0, 0)
    for d in range(3):
        over = p.over[d] + b[d] - a[d]
        if over <= 0:
            continue
        idle = p.idle_lend[d] + b[d + 3] - a[d + 3] + ua[d] - rb[d]
        if over > idle:
            return False
    return not snap.groups or groups.flow_ok(snap, w)


def borrow_need(snap: Snapshot, w: Workload) -> Vec:
    """How much more the team would borrow if ``w`` started."""
    team = snap.teams[w.team]
    q = team.q(w.itype)
    u = team.u(w.itype)
    t = w.total
    return [max(0, u[d] + t[d] - q[d]) - max(0, u[d] - q[d]) for d in range(3)]


def lending(snap: Snapshot, itype: str, names: Collection[str] | None = None) -> dict[str, dict[str, int]]:
    """Who borrows how many accelerators from whom, now: {borrower: {lender: accelerators}}.

    Borrowing is not tied to one lender, so it is attributed deterministically: borrowers in name order
    take from the lender with the most idle quota first; unallocated capacity (idle sharing) is named
    ``(unallocated)`` and is taken first. Borrowing that no lender's idle quota covers any more (a quota was
    cut under running jobs: they run on capacity no quota holds now) is ``(unallocated)`` too, never nobody's.

    ``names``: look at these teams only, for speed (the answer is the same when they include every team with quota
    on ``itype`` or accelerators of it in use: no other team lends or borrows any).
    """
    idle: dict[str, int] = {}
    if snap.idle_sharing:
        ua = snap.unallocated(itype)[0]
        if ua > 0:
            idle["(unallocated)"] = ua
    teams = snap.teams if names is None else {n: snap.teams[n] for n in names}
    for t in teams.values():
        # ``t.lendable_now(itype)[0]``, on accelerators alone
        u = t.u(itype)
        if t.lends:
            left = t.q(itype)[0] - u[0]
            limit = t.lend_limit.get(itype)
            if limit is not None and limit[0] < left:
                left = limit[0]
            if left > 0:
                idle[t.name] = left
    out: dict[str, dict[str, int]] = {}
    if not snap.groups:
        return _lending_flat(snap, itype, teams, idle, out)
    for name, n in groups.own_idle(snap, itype):  # groups' own quota
        idle[name] = n
    for name in sorted(teams):
        t = snap.teams[name]
        over = t.u(itype)[0] - t.q(itype)[0]
        while over > 0 and idle:
            # with groups, the nearest lender in the tree first (siblings, then up the tree)
            lender = min(idle, key=lambda k: (k != "(unallocated)", _near(snap, t, k), -idle[k], k))
            take = min(over, idle[lender])
            out.setdefault(name, {})[lender] = out.get(name, {}).get(lender, 0) + take
            idle[lender] -= take
            over -= take
            if idle[lender] == 0:
                del idle[lender]
        if over > 0:
            out.setdefault(name, {})["(unallocated)"] = out.get(name, {}).get("(unallocated)", 0) + over
    return out


def _lending_flat(snap: Snapshot, itype: str, teams: dict[str, Team], idle: dict[str, int],
                  out: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """``lending`` without groups: the same takes, the lender with the most idle quota found in a heap (unallocated
    capacity first, then the most idle, then by name) instead of by a scan per take."""
    heap = [(k != "(unallocated)", -n, k) for k, n in idle.items()]
    heapq.heapify(heap)
    for name in sorted(teams):
        t = snap.teams[name]
        over = t.u(itype)[0] - t.q(itype)[0]
        while over > 0 and heap:
            first, neg, lender = heapq.heappop(heap)
            take = min(over, -neg)
            got = out.setdefault(name, {})
            got[lender] = got.get(lender, 0) + take
            over -= take
            if take < -neg:
                heapq.heappush(heap, (first, neg + take, lender))
        if over > 0:
            out.setdefault(name, {})["(unallocated)"] = out.get(name, {}).get("(unallocated)", 0) + over
    return out


def _near(snap: Snapshot, team: Team, lender: str) -> int:
    return groups.lender_distance(snap, team, lender) if snap.groups and (
        lender in snap.teams or lender.startswith("group ")) else 0


def ever_fits_quota(snap: Snapshot, w: Workload) -> bool:
    """Could the team hold ``w`` at all: within quota, or by borrowing within its limit from what the other
    teams could ever lend (their quota, plus unallocated capacity with idle resource sharing)?"""
    team = snap.teams[w.team]
    q = team.q(w.itype)
    t = w.total
    if t[0] <= q[0] and t[1] <= q[1] and t[2] <= q[2]:
        return True
    if not team.borrows:
        return False
    cap = borrow_cap(team, w.itype)
    lend = snap.lendable(w.itype)
    own = lend_quota(q, team.lend_limit.get(w.itype)) if team.lends else (0, 0, 0)
    return all(t[d] <= cap[d] and t[d] - q[d] <= lend[d] - own[d] for d in range(3)) and (
        not team.path or groups.ever_fits(snap, team, w.itype, (t[0], t[1], t[2])))


def reclaims_with_own(snap: Snapshot, w: Workload) -> bool:
    """Rules 3 and 4 together: may ``w``, which does not fit its team's quota beside the team's running jobs, take
    lent capacity back *and* stop its team's own lower-priority jobs? Its team may preempt those (TaskRanking,
    ``preempt_team_tasks: LowerPriority``), other teams borrow ``w``'s type, and ``w`` fits within the quota once
    the team's lower-priority jobs that may be stopped (outside their ``min_runtime``) are gone."""
    return snap.reclaim_with_own and _fits_after_own(snap, w)


def own_then_reclaim(snap: Snapshot, w: Workload) -> str:
    """Why a job that waits for idle capacity to borrow would not have to, where rules 3 and 4 together would start
    it but ``policy.reclaim_with_own_jobs`` is off: the words added to its reason ("" where that is not so)."""
    if snap.reclaim_with_own or not _fits_after_own(snap, w):
        return ""
    return (f": team {w.team} is below its {w.itype} quota and other teams borrow from it; the job fits within that "
            "quota once the team's lower-priority jobs stop, and fairpod stops them together with a reclaim only with "
            "policy.reclaim_with_own_jobs: true")


def _fits_after_own(snap: Snapshot, w: Workload) -> bool:
    team = snap.teams[w.team]
    if not (team.preempt_lower and snap.task_ranking):
        return False
    over = snap.pool(w.itype).over
    if over[0] <= 0 and over[1] <= 0 and over[2] <= 0:
        return False
    u = list(team.u(w.itype))
    now = snap.now
    for v in snap.running_by.get((w.itype, w.team), {}).values():
        st = v.started
        if within_team.outranks(snap, team, w, v) and not (v.min_runtime and st is not None and now - st < v.min_runtime):
            t = v.total
            u[0] -= t[0]
            u[1] -= t[1]
            u[2] -= t[2]
    q, t = team.q(w.itype), w.total
    return u[0] + t[0] <= q[0] and u[1] + t[1] <= q[1] and u[2] + t[2] <= q[2]
