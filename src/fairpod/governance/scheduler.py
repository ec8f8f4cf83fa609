"""One scheduling cycle over a snapshot: the governance engine.

``schedule(snap)`` looks at the pending jobs, admits what the rules allow, plans preemptions, and returns
the decisions. It reads no clock (``snap.now`` is the time) and does no I/O; it leaves ``snap`` in the
state after its decisions (admitted jobs running, victims back in their queues).

Longer than fairpod's usual module (~930 lines): the cycle's steps share one ``_Cycle`` object and its
per-cycle caches (shapes that failed, team checks, never-fits verdicts); split across modules they would pass
that state around on the engine's hottest path, which the native build compiles as one unit.

A cycle:
1. Starvation guard (rule 6): a team's first job that could run at all and has waited longer than the policy's
   ``starvation_guard_seconds`` goes first; if it still cannot start, nodes (and, if it must borrow,
   borrowable capacity, out of what is lendable only) are held for it. Held capacity is backfilled with
   what cannot delay it: jobs expected to end before the held nodes are expected to have room for it (by
   the running jobs' expected durations), and jobs of its team that leave room for it within the team's
   quota or borrow limit. Nodes held for a job that must borrow never refuse another team's job within
   its own quota.
2. Rounds, twice: first only jobs within their team's quota, then all. In each round every team with
   pending work offers its first job whose shape has not failed this cycle (a job that cannot start never
   blocks other teams, nor other shapes of its own team). Teams go in this order: jobs within their team's quota first; then, under FairShare, the team whose weighted
   share *after admitting its job* is lowest first (as Kueue's fair sharing; two teams that borrow nothing yet
   are told apart by weight and job size, not by who came first; FirstComeFirstServe: the earliest job
   first); then priority; then submit time.
   Each job is admitted if its team may hold it (quota, borrow limit) and it can be placed; otherwise the
   engine tries preemption (reclaim, priority, fair share). The cycle ends when a round admits nothing. With
   groups under FairShare, the borrowing rounds rank the offers again after each admission (rule 2b).
   A job whose team check failed on its team's own quota or borrow limit in an earlier cycle, with nothing it
   read changed since, is known to fail again with the same reason (``known_to_fail``): it is neither ranked nor
   tried, and keeps its turn (docs/architecture.md, "The engine"); so is a job behind its team's starving job
   that already waits with that reason. A team all of whose offers are known to fail sits the rounds out
   (``verdict``, kept across cycles while what it read is unchanged).
   In a team with per-user rules (rule 9, ``users``) a job over its user's cap waits without trying, and a
   RoundRobin team offers the job of the user who runs the fewest accelerators first.
Under FairShareHistory (rule 5b, ``history``) the cycle first folds the time since the last cycle into each
team's decayed borrowed share, and records the shares after its decisions.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Set

from fairpod.governance import (
    aging,
    borrow_priority,
    budget,
    elastic,
    fairshare,
    fungibility,
    groups,
    hierarchical_reclaim,
    history,
    preemption,
    quota,
    topology,
    users,
)
from fairpod.governance.consolidation import OFF, consolidate, moved_reason
from fairpod.governance.decisions import Admit, Decision, Preempt, Wait, displaced_reason
from fairpod.governance.ordering import PROTECTED_AFTER
from fairpod.governance.placement import never_fits, place, why_not
from fairpod.governance.snapshot import Node, Snapshot, Team, Workload


def _lenders(snap: Snapshot, w: Workload, need: int) -> tuple[tuple[str, int], ...]:
    idle = []
    if snap.idle_sharing:
        ua = snap.unallocated(w.itype)[0]
        if ua > 0:
            idle.append((-(10**12), "(unallocated)", ua))
    it = w.itype
    for t in snap.lenders_of.get(it, ()):  # a team without quota on the type lends none of it
        if t.name != w.team and t.lends:
            left = t.q(it)[0] - t.u(it)[0]  # ``t.lendable_now(it)[0]``: its idle quota, at most its lending limit
            limit = t.lend_limit.get(it)
            if limit is not None and limit[0] < left:
                left = limit[0]
            if left > 0:
                idle.append((-left, t.name, left))
    if snap.groups:  # the nearest lenders in the tree first: siblings, then up the tree
        me = snap.teams[w.team]
        idle += [(-n, name, n) for name, n in groups.own_idle(snap, it)]  # groups' own quota
        idle.sort(key=lambda e: (0 if e[1] == "(unallocated)" else groups.lender_distance(snap, me, e[1]), e[0],
                                 e[1]))
    else:
        idle.sort()
    out = []
    for _, name, left in idle:
        if need <= 0:
            break
        take = min(left, need)
        out.append((name, take))
        need -= take
    return tuple(out)


def _entitled(team: Team, w: Workload) -> bool:
    """Does ``w`` fit within its team's quota on its own (once the team's other jobs have ended)?"""
    q = team.q(w.itype)
    t = w.total
    return t[0] <= q[0] and t[1] <= q[1] and t[2] <= q[2]


def _protected(team: Team, w: Workload) -> bool:
    """Rule 7: a job preempted ``PROTECTED_AFTER`` times that fits its team's quota runs only while the team's
    protected jobs, it included, fit within that quota (``_harboured``); one that needs more than the quota may
    still borrow, and goes last among the victims (``ordering``)."""
    return w.preemptions >= PROTECTED_AFTER and _entitled(team, w)


def _protected_use(snap: Snapshot, team: Team, itype: str) -> tuple[int, int, int]:
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


def _harboured(snap: Snapshot, team: Team, w: Workload) -> bool:
    """Rule 7: would the team's running protected jobs and the protected ``w`` fit within the team's quota? Then
    ``w`` may start even by borrowing: a reclaim takes a team's jobs only while the team uses more than its
    quota, and its unprotected jobs first (``ordering``), so it stops before it reaches a protected one (the
    unprotected jobs hold at least what the team borrows)."""
    q = team.q(w.itype)
    r = _protected_use(snap, team, w.itype)
    t = w.total
    return r[0] + t[0] <= q[0] and r[1] + t[1] <= q[1] and r[2] + t[2] <= q[2]


def _within_or_undo(snap: Snapshot, w: Workload, plan: tuple[list[tuple[Workload, str]], list[str]],
                    ) -> tuple[list[tuple[Workload, str]], list[str]] | None:
    """Keep a preemption plan for a protected job only if the job then runs within its team's quota."""
    if quota.within_quota(snap.teams[w.team], w.itype, w.total):
        return plan
    for v, _ in plan[0]:
        snap.assign(v, v.nodes or [])
    return None



def borrowed_words(lenders: list[tuple[str, int]] | tuple[tuple[str, int], ...]) -> str:
    """'john', 'john (4), smith (4)' with several lenders, 'idle capacity' with none: the borrowing reason's
    words (``fairpod.cli.output.reason_in_units`` reads them)."""
    if not lenders:
        return "idle capacity"
    if len(lenders) == 1:
        return lenders[0][0]
    return ", ".join(f"{name} ({n})" for name, n in lenders)

class _Cycle:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.out: list[Decision] = []
        self.reserved: dict[str, str] = {}
        self.holders: set[str] = set()
        self.held_for_borrower: dict[str, str] = {}  # nodes held for a starving job that must borrow
        self.victims: list[tuple[Workload, Preempt]] = []
        # never-fits verdicts by job shape: they read the nodes alone, so they hold across cycles until the nodes change
        if snap.never_at != snap.nodes_version or len(snap.never_fit) > 4096:
            snap.never_fit = {}
            snap.never_at = snap.nodes_version
        self.never = snap.never_fit
        self.until: dict[str, float] = {}  # starving job -> when it is expected to start on its held nodes
        self.borrow_until: float | None = None  # earliest such time of a starving job that must borrow
        self.strict: dict[str, Workload] = {}  # team -> its starving job that could not start
        self.behind_reasons: dict[str, str] = {}  # starving job -> why its team's other jobs wait behind it
        self.started: dict[str, float | None] = {}  # jobs admitted in this cycle: when they were enqueued
        # within the cycle, by usage version (nodes and queues change in it only with usage): team checks, and
        # whether a team's borrow limit is lifted (``quota.team_check``)
        self.checked: dict[tuple, tuple[bool, bool, str]] = {}
        self.lifted: dict[tuple, bool] = {}
        self.ranks: dict[tuple, tuple] = {}  # rank of an offer, by job and its team's usage version
        self.lends: dict[str, list[int]] = {}  # ``lendable`` per instance type
        # the round being tried (``rounds``): its offers in order, the one being tried, the offers known to fail
        # that were left unranked, and those of them found to come before the one being tried (``rank_deferred``)
        self.offers: list[tuple[tuple, str, Team, Workload]] = []
        self.at = 0
        self.deferred: list[tuple[str, Team, Workload]] = []
        self.settled: list[tuple[str, Team, Workload]] = []
        # teams that sit out the round being tried, each with its offers of this phase, all known to fail (the k-th in
        # the phase's k-th round; ``verdict``); the round's number; the shapes failed in the phase; the teams that sat
        # out all of the first phase (only those may sit out the second)
        self.sitting: list[tuple[str, Team, list[Workload]]] = []
        self.round = 0
        self.failed: dict[str, set] = {}
        self.sat: set[str] = set()
        self.sitting_second: dict[str, list[Workload]] = {}  # the second phase's offers of the teams that may sit it
        self.held_version = 0  # counts the calls of ``hold`` (the held nodes and their times change only there)
        self.held_views: dict[tuple, dict[str, str]] = {}  # ``reserved_for``, by what it depends on
        self.collect: list[str] | None = None  # while trying fallback instance types: the reasons of each
        self.passed: str = ""  # why a job admitted on a fallback type passed over the ones before it

    def wait(self, w: Workload, reason: str) -> None:
        if self.collect is not None:  # trying a fallback instance type: the caller words the reason
            self.collect.append(reason)
            return
        if w.reason != reason:
            w.reason = reason
            self.out.append(Wait(w.id, reason))
            self.snap.verdicts.pop(w.team, None)  # what its team's verdict read has changed

    def admit(self, w: Workload, nodes: list[str], within: bool, victims: list[tuple[Workload, str]]) -> None:
        snap = self.snap
        if snap.cost_held:
            snap.cost_held.pop(w.id, None)  # its room freed by itself while its reclaim waited
        need = quota.borrow_need(snap, w)[0]
        lenders = _lenders(snap, w, need) if need > 0 else ()
        after = []
        for v, kind in victims:
            if kind == "reclaim":
                why = f"reclaimed by team {w.team} for job {w.id}"
            elif kind == "priority":
                why = f"preempted by higher-priority job {w.id} of team {w.team}" if v.team == w.team else \
                    borrow_priority.reason(w)
            elif kind == "move":
                why = moved_reason(w)
            else:
                why = f"preempted for fair share: team {w.team} (job {w.id}) has the lower share of idle capacity"
            p = Preempt(v.id, w.id, kind, why)
            self.out.append(p)
            self.victims.append((v, p))  # back in its queue at the end of the cycle, not offered again in it
            after.append(v.id)
        snap.start(w, nodes, snap.now)
        if w.max_n:
            elastic.add_replicas(self, w, borrow=False)  # the largest size that fits within quota now
            nodes = list(w.nodes or nodes)
        self.started[w.id] = w.enqueued
        team = snap.teams[w.team]
        if within or need <= 0:
            reason = f"admitted within team {team.name}'s quota"
        else:
            reason = f"admitted, borrowing {need} accelerators from " + borrowed_words(lenders)
        fallback = bool(w.choices) and w.itype != w.choices[0][0]
        if fallback:
            reason += f", on {w.itype} ({self.passed})"
        w.reason = reason
        w.borrowed_from = dict(lenders)
        r = w.req
        self.out.append(Admit(w.id, tuple(nodes), reason, need, lenders, tuple(after),
                              w.itype if w.choices else "", (r[0], r[1], r[2]) if w.choices else None))

    def ends_before(self, w: Workload, t: float) -> bool:
        """Would ``w``, started now, end (by its expected duration) no later than ``t``?"""
        return w.expected is not None and t != math.inf and self.snap.now + w.expected <= t

    def reserved_for(self, w: Workload, within: bool) -> dict[str, str]:
        """Nodes ``w`` may not use: those held for another starving job, except when ``w`` ends before that
        job could start there (backfill); nodes held for a job that must borrow bind only jobs that borrow too
        (the guard holds capacity only out of what is lendable)."""
        mine = within or not self.held_for_borrower
        if mine and not self.reserved:
            return self.reserved
        # the same for every job that ends at the same time (or has no expected duration), until ``hold`` holds
        # more: computed once for each
        end = None if w.expected is None else self.snap.now + w.expected
        key = (mine, end, self.held_version)
        got = self.held_views.get(key)
        if got is None:
            held = self.reserved if mine else {**self.held_for_borrower, **self.reserved}
            if held and w.expected is not None:
                held = {n: h for n, h in held.items() if not self.ends_before(w, self.until[h])}
            got = self.held_views[key] = held
        return got

    def team_may_start(self, w: Workload) -> bool:
        """A team with a starving job H admits another of its jobs only if it cannot delay H: it ends before H
        could start, or H still fits the team's quota (or borrow limit) beside it, in the same way."""
        h = self.strict.get(w.team)
        if h is None or h is w:
            return True
        if self.ends_before(w, self.until[h.id]):
            return True
        team = self.snap.teams[w.team]
        if w.itype != h.itype:
            return True
        if _protected(team, h):
            # H waits for room beside the team's protected jobs (``_harboured``): only a protected job takes it
            if w.preemptions < PROTECTED_AFTER:
                return True
            r = _protected_use(self.snap, team, h.itype)
            q = team.q(h.itype)
            return all(r[d] + w.total[d] + h.total[d] <= q[d] for d in range(3))
        both = tuple(a + b for a, b in zip(w.total, h.total, strict=True))
        if _entitled(team, h):
            return quota.within_quota(team, h.itype, both)
        cap = quota.borrow_cap(team, h.itype)
        u = team.u(h.itype)
        return quota.within_quota(team, w.itype, w.total) and all(u[d] + both[d] <= cap[d] for d in range(3))

    def try_start(self, w: Workload) -> bool:
        if len(w.choices) > 1 and self.collect is None:
            return self.try_types(w)
        return self.try_one(w)

    def try_types(self, w: Workload) -> bool:
        """A job with fallback instance types (``Workload.choices``): the first type it fits now without
        preempting anything, where borrowing counts as fitting unless the policy says to try the next type first
        (then the first that borrows is taken only if no later one fits within quota); else, type by type, what
        preemption could free. A job that waits says why each type was passed over."""
        snap = self.snap
        team = snap.teams[w.team]
        if users.over_cap(team, w) or not self.team_may_start(w):
            return self.try_one(w)
        holder = w.id if w.id in self.holders else None
        why: list[str] = []
        borrows = -1
        for i in range(len(w.choices)):
            w.choose(i)
            ok, within, no = self.team_check(w)
            if not ok:
                why.append(f"{w.itype}: {no}")
                continue
            if not quota.pool_ok(snap, w, holder):
                why.append(f"{w.itype}: " + ("no idle capacity to borrow" if not within else
                                             "its idle quota is lent to other teams (waiting for reclaim)"))
                continue
            nodes = place(snap, w, self.reserved_for(w, within))
            if nodes is None:
                why.append(f"{w.itype}: {self.never_fits(w) or why_not(snap, w)}")
                continue
            if within or snap.fallback_borrows:
                self.passed = "; ".join(why) or "its first choice"
                self.admit(w, nodes, within, [])
                return True
            why.append(f"{w.itype}: would borrow (" + (fungibility.WORDS if snap.fallback_preempts else
                                                        "policy.fallback_when_can_borrow: TryNextInstanceType") + ")")
            if borrows < 0:
                borrows = i
        if borrows >= 0 and snap.fallback_preempts and fungibility.preempt_within(self, w, why):
            return True  # PreemptionOverBorrowing: (preempt, no borrowing) before (fit, borrowing)
        if borrows >= 0:
            w.choose(borrows)
            nodes = place(snap, w, self.reserved_for(w, False))
            if nodes is not None:
                self.passed = "; ".join(why[:borrows]) + ("; " if borrows else "") + \
                    "no later instance type fits within quota"
                self.admit(w, nodes, False, [])
                return True
        # nothing fits as the cluster is: what preemption could free, type by type (the reasons of each kept)
        self.collect = []
        try:
            for i in range(len(w.choices)):
                w.choose(i)
                self.passed = "; ".join(f"{it}: {r}" for (it, _), r in zip(w.choices[:i], self.collect,
                                                                           strict=False))
                if self.try_one(w):
                    return True
            reasons = [f"{it}: {r}" for (it, _), r in zip(w.choices, self.collect, strict=False)]
        finally:
            self.collect = None
            if w.id not in snap.running:
                w.choose(0)
        self.wait(w, "no instance type fits now: " + "; ".join(reasons))
        return False

    def try_one(self, w: Workload) -> bool:
        snap = self.snap
        capped = users.over_cap(snap.teams[w.team], w)
        if capped:
            return self.start_in_place_of_own(w, capped)
        if not self.team_may_start(w):
            self.wait(w, self.behind(self.strict[w.team]))
            return False
        holder = w.id if w.id in self.holders else None
        ok, within, why = self.team_check(w)
        reserved = self.reserved_for(w, within)
        if holder is None and self.borrow_until is not None and self.ends_before(w, self.borrow_until):
            holder = w.id  # ends before a held borrower could start: may use what is held for it
        if ok:
            pool_ok = quota.pool_ok(snap, w, holder)
            nodes = place(snap, w, reserved) if pool_ok else None
            if nodes is not None:
                self.admit(w, nodes, within, [])
                return True
        else:
            pool_ok = True
        self.rank_deferred()  # other teams' jobs may be stopped from here on
        if snap.elastic and elastic.shrink_to_fit(self, w, within, reserved, holder, ok):
            return True  # replicas above elastic jobs' minimum go before any job is stopped whole
        held = within and w.id in snap.cost_held  # a costly reclaim waits (rule 3b): no plan before its time
        g = hierarchical_reclaim.inside(snap, snap.teams[w.team], w) if ok and not within and snap.groups else None
        plan = None
        if g is not None:  # rule 3c (opt-in): a group's quota back from outside it
            grp, below = g
            plan = preemption.plan(snap, w, False, reserved, holder, cross_ok=lambda v: hierarchical_reclaim.takes(
                snap, w, v, grp, below), cross_kind="reclaim")
        if plan is None and not held:
            plan = preemption.plan(snap, w, within, reserved, holder, cross_team=ok)
        # rules 3 and 4 together: within quota once its own lower-priority jobs stop, it also takes back lent capacity
        both = plan is None and not within and quota.reclaims_with_own(snap, w)
        if both and w.id not in snap.cost_held:
            plan = preemption.plan(snap, w, True, self.reserved_for(w, True), holder, within_after=True)
        if plan is None and ok and not within and borrow_priority.applies(snap):  # rule 5c (opt-in)
            plan = preemption.plan(snap, w, False, reserved, holder, cross_ok=lambda v: borrow_priority.takes(
                snap, w, v), cross_kind="priority")
        if plan is not None and not ok and (w.quota_bound or _protected(snap.teams[w.team], w)):
            plan = _within_or_undo(snap, w, plan)  # its own lower-priority jobs, only to run within quota
        if plan is not None:
            victims, nodes = plan
            self.admit(w, nodes, quota.within_quota(snap.teams[w.team], w.itype, w.total), victims)
            return True
        if (within or both) and w.id in snap.cost_held:  # it fits once its reclaim may go (a plan was found)
            self.wait(w, preemption.held_reason(snap, w))
            return False
        never = self.never_fits(w)
        if never:
            self.wait(w, never)
        elif both:
            self.wait(w, f"waiting for reclaim: the job fits team {w.team}'s {w.itype} quota once the team's "
                         "lower-priority jobs stop, but the rest is held by other teams' borrowed jobs that cannot be "
                         "preempted yet")
        elif not ok:
            self.wait(w, why)
        elif not pool_ok:
            if within:
                self.wait(w, f"waiting for reclaim: team {w.team}'s idle quota on {w.itype} is lent to other "
                             "teams whose jobs cannot be preempted yet")
            else:
                self.wait(w, f"no idle {w.itype} capacity to borrow" + quota.own_then_reclaim(snap, w))
        else:
            self.wait(w, why_not(snap, w))
        return False

    def start_in_place_of_own(self, w: Workload, capped: str) -> bool:
        """Rule 9.6: a job over its user's cap starts only in place of lower-priority jobs of its team (as rule 7
        allows) that free enough of its user's accelerators; else it waits with the cap as its reason."""
        team = self.snap.teams[w.team]
        if users.may_displace_own(self.snap, team, w) and self.team_may_start(w):
            ok, within, _ = self.team_check(w)
            holder = w.id if w.id in self.holders else None
            self.rank_deferred()
            plan = preemption.plan(self.snap, w, within, self.reserved_for(w, within), holder, cross_team=False)
            if plan is not None and not ok and (w.quota_bound or _protected(team, w)):
                plan = _within_or_undo(self.snap, w, plan)
            if plan is not None:
                victims, nodes = plan
                self.admit(w, nodes, quota.within_quota(team, w.itype, w.total), victims)
                return True
        self.wait(w, capped)
        return False

    def team_check(self, w: Workload) -> tuple[bool, bool, str]:
        """``quota.team_check``, except that a protected job (rule 7) does not borrow; once per job and usage in
        the cycle (the guard asks again right after ``try_start``)."""
        key = (w.id, w.itype, self.snap.version)
        got = self.checked.get(key)
        if got is None:
            got = self.checked[key] = self._team_check(w)
        return got

    def quota_stamp(self, team: Team, w: Workload) -> tuple | None:
        """What ``quota.team_check`` reads when it fails on the team's own quota or borrow limit: the team's
        usage (its version) and limits, and the job's size; None where a failure may also depend on budgets (the
        clock), on other teams' queues (``borrow_limit_while_others_wait``) or on the groups above the team."""
        if team.budget or team.path or self.snap.borrow_limit_while_others_wait:
            return None
        it = w.itype
        return (team.version, it, w.total, team.q(it), team.borrows, team.lends, team.borrow_limit,
                team.borrow_abs.get(it))

    def _team_check(self, w: Workload) -> tuple[bool, bool, str]:
        team = self.snap.teams[w.team]
        got = self.snap.quota_blocked.get(w.id)
        if got is not None and got[0] == self.quota_stamp(team, w):
            return got[1]  # failed on the team's quota before, and nothing it read has changed since
        raw = quota.team_check(self.snap, w, self.lifted)
        if not raw[0]:
            stamp = self.quota_stamp(team, w)
            if stamp is not None:
                self.snap.quota_blocked[w.id] = (stamp, raw)
        return team_check(self.snap, w, self.lifted, raw)

    def behind(self, h: Workload) -> str:
        """Why a job of a team with a starving job ``h`` waits when it could delay ``h`` (``team_may_start``)."""
        got = self.behind_reasons.get(h.id)
        if got is None:
            got = self.behind_reasons[h.id] = (f"waiting behind job {h.id} of team {h.team}, which has waited "
                                               "longest and has capacity held for it")
        return got

    def known_to_fail(self, w: Workload) -> bool:
        """Would ``try_start(w)`` fail now, and leave everything as it is (no decision: ``w`` already waits with
        that reason)? Exact, not a guess: the same checks as ``try_one``'s way to that failure. Two ways: behind
        its team's starving job (``team_may_start``), or on its team's own quota or borrow limit with the team
        check remembered across cycles (``quota_stamp``). Where a failed team check could still end in a
        preemption plan (own lower-priority jobs, elastic jobs) or the job has fallback types or a per-user cap,
        this says False and ``try_start`` runs."""
        snap = self.snap
        team = snap.teams[w.team]
        if len(w.choices) > 1 or team.user_cap is not None:
            return False
        if self.strict and not self.team_may_start(w):  # try_one's first check, before any team check
            return w.reason == self.behind(self.strict[w.team])
        got = snap.quota_blocked.get(w.id)
        return not (got is None or snap.elastic or (team.preempt_lower and snap.task_ranking)
                    or got[0] != self.quota_stamp(team, w) or w.reason != (self.never_fits(w) or got[1][2]))

    def hold(self, w: Workload) -> None:
        """Starvation guard: hold nodes (and borrowable capacity) for ``w``."""
        snap = self.snap
        self.holders.add(w.id)
        self.held_version += 1
        self.until[w.id] = self.quota_ready_at(w)
        ok, within, _ = self.team_check(w)
        if not ok:
            return
        taken = self.reserved.keys() | self.held_for_borrower.keys()
        # which nodes, and when the last of them has room: the same while nodes, jobs and the nodes held before
        # are (a cycle that follows one with no start or end holds the same again)
        key = ("hold", w.id, snap.version, frozenset(taken))
        got = snap.memo.get(key)
        if got is None:
            free = self.nearest(w, taken)
            last = max((self.room_at(snap.nodes[name], w) for *deficit, name in free if any(deficit)),
                       default=-math.inf)
            got = snap.memo[key] = (free, last)
        free, last = got
        held = self.reserved if within else self.held_for_borrower
        for *_, name in free:
            held[name] = w.id
        ready = max(snap.now, last) if len(free) == w.n else math.inf
        self.until[w.id] = max(self.until[w.id], ready)
        if not within:
            self.borrow_until = min(self.until[w.id], self.borrow_until or math.inf)
            need = quota.borrow_need(snap, w)
            rb = snap.pool(w.itype).reserved_borrow
            for d in range(3):
                rb[d] += need[d]

    def nearest(self, w: Workload, taken: Set[str]) -> list[tuple[int, int, int, str]]:
        """The ``w.n`` nodes not ``taken`` that are nearest to having room for a replica of ``w`` (all in one domain
        of its required topology level, if it has one), each with what it lacks."""
        snap = self.snap
        a = w.req.acc
        if w.topology_required and snap.levels:
            near = self.near(w, snap.by_type.get(w.itype, ()), taken)
            return topology.hold(snap, w, sorted(near))  # all in one domain of its required level
        if a > 0:
            # the nodes with the most free accelerators first, a whole count at a time: once n nodes are found,
            # every node with fewer free accelerators lacks more than all of them (and where it lacks none,
            # the other resources decide, so every node with enough free is looked at)
            near = []
            buckets = snap.by_free.get(w.itype, {})
            for b in sorted(buckets, reverse=True):
                if b < a and len(near) >= w.n:
                    break
                near += self.near(w, (snap.nodes[name] for name in buckets[b]), taken)
        else:
            near = self.near(w, snap.by_type.get(w.itype, ()), taken)
        heapq.heapify(near)  # the n nearest, nearest first, without sorting them all
        return [heapq.heappop(near) for _ in range(min(w.n, len(near)))]

    @staticmethod
    def near(w: Workload, nodes: Iterable[Node], taken: Set[str]) -> list[tuple[int, int, int, str]]:
        """The nodes ``w`` may hold, each with what it lacks for a replica of ``w`` (the closest first, once
        sorted)."""
        a, c, m = w.req
        return [
            (a - f[0] if f[0] < a else 0, c - f[1] if f[1] < c else 0, m - f[2] if f[2] < m else 0, nd.name)
            for nd in nodes
            if nd.schedulable and nd.name not in taken and (nd.health_passed or not w.passed_only)
            for f in (nd.free,)
        ]

    def room_at(self, nd: Node, w: Workload) -> float:
        """When node ``nd`` is expected to have room for one replica of ``w`` (once it is ``now`` or later): its
        jobs end by their expected durations (inf if one that must end first has none)."""
        free = list(nd.free)
        r = w.req
        for end, v in sorted((self.snap.running[j].ends_by(), j) for j in nd.jobs):
            vr = self.snap.running[v].req
            free = [free[0] + vr.acc, free[1] + vr.mcpu, free[2] + vr.mib]
            if free[0] >= r.acc and free[1] >= r.mcpu and free[2] >= r.mib:
                return end
        return math.inf

    def quota_ready_at(self, w: Workload) -> float:
        """When ``w``'s team is expected to have room for it within its quota (or borrow limit): its running
        jobs end by their expected durations (inf if one that must end first has none)."""
        team = self.snap.teams[w.team]
        key = ("quota_ready", w.id, team.version)
        end = self.snap.memo.get(key)
        if end is None:
            end = self.snap.memo[key] = self._quota_ready(team, w)
        return max(end, self.snap.now)

    def _quota_ready(self, team: Team, w: Workload) -> float:
        cap = quota.borrow_cap(team, w.itype) if not _entitled(team, w) else list(team.q(w.itype))
        u = list(team.u(w.itype))
        t = w.total
        if all(u[d] + t[d] <= cap[d] for d in range(3)):
            return -math.inf
        running = self.snap.running_by.get((w.itype, w.team), {})
        ends = [(v.ends_by(), v.id) for v in running.values()]
        heapq.heapify(ends)  # usually a few of the earliest ends make room: no need to sort them all
        while ends:
            end, v = heapq.heappop(ends)
            if end == math.inf:
                break
            vt = running[v].total
            u = [u[0] - vt[0], u[1] - vt[1], u[2] - vt[2]]
            if u[0] + t[0] <= cap[0] and u[1] + t[1] <= cap[1] and u[2] + t[2] <= cap[2]:
                return end
        return math.inf

    def never_fits(self, w: Workload) -> str | None:
        """``placement.never_fits``, once per job shape while the nodes stay as they are (``Snapshot.nodes_version``)."""
        if w.shape not in self.never:
            self.never[w.shape] = never_fits(self.snap, w)
        return self.never[w.shape]

    def first_runnable(self, team: Team) -> Workload | None:
        """The team's first job that could run at all (on the healthy nodes, within its quota or borrow
        limit); a job that never can must not hold the team up. Kept across cycles while the team's queue, usage
        and the nodes are unchanged, for a team without per-user rules or budgets (what else it reads is fixed)."""
        snap = self.snap
        if team.per_user or team.budget:
            return self._first_runnable(team)
        tops = team.queue.ordered()
        key = ("first", team.name)
        got = snap.memo.get(key)
        if got is None or got[0] is not tops or got[1] != team.version or got[2] != snap.nodes_version:
            got = snap.memo[key] = (tops, team.version, snap.nodes_version, self._first_runnable(team))
        h: Workload | None = got[3]
        return h

    def _first_runnable(self, team: Team) -> Workload | None:
        skip: set = set()
        while True:
            h = team.queue.head(skip, users.order(team))
            if h is None or (self.never_fits(h) is None and quota.ever_fits_quota(self.snap, h)
                             and (not users.over_cap(team, h) or users.may_displace_own(self.snap, team, h))
                             and not (team.budget and budget.blocks(
                                 team, h, not quota.within_quota(team, h.itype, h.total)))):
                return h
            skip.add(h.shape)

    def lendable(self, itype: str) -> list[int]:
        """``snap.lendable``, once per instance type and cycle (quotas and nodes do not change within one)."""
        got = self.lends.get(itype)
        if got is None:
            got = self.lends[itype] = self.snap.lendable(itype)
        return got

    def rank(self, team: Team, w: Workload) -> tuple:
        """The order key of ``w`` among the teams' offers; once per job and usage of its team in the cycle (the
        rounds offer the same heads again and again)."""
        key = (w.id, self.snap.version if self.snap.groups else team.version)  # groups: others' usage counts too
        got = self.ranks.get(key)
        if got is None:
            got = self.ranks[key] = self._rank(team, w)
        return got

    def _rank(self, team: Team, w: Workload) -> tuple:
        snap = self.snap
        within = quota.within_quota(team, w.itype, w.total)
        if within:
            second = 0.0
        elif snap.fair_share:
            # after admission (weight decides at once); under FairShareHistory with the team's past borrowing
            second = fairshare.share(snap, team, w.itype, w.total, with_history=True, lend=self.lendable(w.itype))
        else:
            second = 0.0
        prio = -budget.priority(team, w) if snap.task_ranking else 0  # past 80 % of a budget: the lowest
        if snap.groups:
            # fair share level by level from the top: each group above the team, then the team (rule 2b)
            t = w.total
            levels = groups.shares(snap, team, w.itype, (t[0], t[1], t[2])) if not within and snap.fair_share else []
            return (not within, (*levels, second), prio, w.submit, w.seq)
        return (not within, second, prio, w.submit, w.seq)

    def run(self) -> list[Decision]:
        snap = self.snap
        self.begin()
        failed = self.guard()
        teams = [t for t in snap.waiting.values() if t.queue]
        self.rounds(teams, failed, within_only=True)
        self.rounds(teams, failed, within_only=False)
        if snap.consolidation != OFF:  # rule 12: move borrowed jobs to free whole nodes for a waiting one
            consolidate(self, failed, snap.consolidation)
        elastic.grow(self)
        for v, pre in self.victims:
            again = v.id in self.started  # admitted and taken back in this cycle: it never ran, its wait goes on
            if not again:
                v.preemptions += 1  # before the requeue: a job protected now is queued as such
            snap.requeue(v, snap.now)
            if again:
                v.enqueued = self.started[v.id]
                v.reason = displaced_reason(pre)
            else:
                v.reason = pre.reason
        history.record(snap)
        return self.out

    def begin(self) -> None:
        """What a cycle does before its steps: old cache entries dropped, held reclaims whose wait is over let go,
        capacity held for borrowers released, the fair-share history brought to now."""
        snap = self.snap
        if len(snap.memo) > 4 * len(snap.teams) + 1024:
            snap.memo.clear()  # entries of old versions
        snap.cycle += 1
        snap.retry_at = math.inf
        if snap.cost_held:  # reclaims held back (rule 3b): those whose wait is over are planned for again
            for jid in [j for j, (until, _) in snap.cost_held.items() if until <= snap.now]:
                del snap.cost_held[jid]
            snap.retry_at = min((until for until, _ in snap.cost_held.values()), default=math.inf)
        for p in snap.pools.values():
            p.reserved_borrow = [0, 0, 0]
        history.advance(snap)
        aging.refresh(snap)  # (opt-in) queues ordered again where a waiting job's boost grew

    def guard(self) -> dict[str, set]:
        """Step 1 (the starvation guard): each team's starving job goes first; those that cannot start get their
        nodes held and their team marked (``strict``). The shapes that failed, by team."""
        snap = self.snap
        starving = []
        for team in list(snap.waiting.values()):
            if team.queue:
                h = self.first_runnable(team)
                if h is not None and snap.now - h.waiting_since() >= snap.starvation_guard:
                    starving.append(h)
        starving.sort(key=lambda w: (w.enqueued, w.seq))
        failed: dict[str, set] = {}
        for w in starving:
            if self.known_to_fail(w) or not self.try_start(w):
                self.strict[w.team] = w
                failed[w.team] = {w.shape}
                self.hold(w)
        return failed

    def rounds(self, teams: list[Team], failed: dict[str, set], within_only: bool) -> None:
        """Offer each team's first job until a round admits nothing. With ``within_only``, only jobs within
        their team's quota are offered (shapes that would borrow are skipped, not failed), so idle capacity
        is lent only after every team has taken what it is entitled to in this cycle."""
        borrowing: dict[str, set] = {}
        at: dict[str, tuple[list, int]] = {}  # per team: where ``offer_of`` found its last offer in its queue's tops
        defer = not self.snap.groups  # with groups, a team's rank reads the usage of others too
        active = teams
        self.failed = failed
        self.round = 0
        if defer:  # teams all of whose offers in this phase are known to fail sit it out (``verdict``)
            active = []
            for t in teams:
                seq = self.verdict(t, within_only)
                if seq is None:
                    active.append(t)
                else:
                    self.sitting.append((t.name, t, seq))
        elastic_before = bool(self.snap.elastic)
        # with groups, under FairShare, while borrowing: the offers are ranked again after each admission, so a team
        # of a heavy group takes job after job while its shares, level by level, stay the lowest (rule 2b)
        one_by_one = bool(self.snap.groups) and self.snap.fair_share and not within_only
        while True:
            if self.sitting and bool(self.snap.elastic) != elastic_before:
                active = active + [t for t, _ in self.unsit()]  # an elastic job started: known_to_fail may differ
            if not active:
                break
            offers = []
            for t in active:
                h = self.offer_of(t, failed.get(t.name), borrowing.setdefault(t.name, set()) if within_only else None,
                                  at)
                if h is not None:
                    if defer and self.known_to_fail(h):
                        self.deferred.append((t.name, t, h))  # fails where it stands in the order: no rank needed
                    else:
                        offers.append((self.rank(t, h), t.name, t, h))
            if not offers and not self.deferred:
                break
            offers.sort(key=lambda o: (o[0], o[1]))
            self.offers = offers
            nxt: list[Team] = []
            i = 0
            while i < len(offers):  # (``rank_deferred`` may insert offers after the i-th)
                _, name, t, w = offers[i]
                self.at = i
                if self.known_to_fail(w) or not self.try_start(w):
                    failed.setdefault(name, set()).add(w.shape)
                elif one_by_one:
                    nxt.extend(o[2] for o in offers[i:])  # (``t`` first among them) ranked again
                    break
                nxt.append(t)
                i += 1
            for name, t, w in self.deferred + self.settled:
                failed.setdefault(name, set()).add(w.shape)
                nxt.append(t)
            self.deferred = []
            self.settled = []
            self.round += 1
            active = nxt
        # the teams that sat out: each offer failed in its round (no round tried anything that could change that)
        for name, _, seq in self.sitting:
            f = failed.setdefault(name, set())
            for w in seq:
                f.add(w.shape)
            if within_only:
                self.sat.add(name)  # (an elastic job that started would have brought it back)
        self.sitting = []

    def verdict(self, t: Team, within_only: bool) -> list[Workload] | None:
        """The team's offers in this phase of the rounds if every one of them is known to fail (``known_to_fail``),
        in the order the rounds would offer them; else None. Both phases are judged at the start of the first (the
        second's are the team's if it sat out the first: nothing it read changed in between) and the verdict is kept
        on the snapshot across cycles while what it read is unchanged: the team's queue (its tops, the same list),
        usage and starving job with the time held for it, the nodes, whether elastic jobs run, and no decision on
        the team's jobs since (``wait``). ``known_to_fail`` reads the clock and the time held for the starving job
        only through ``ends_before``: the verdict holds while that says for each job what it said then (checked on
        the longest expected run of those it said yes of, and the shortest of the others)."""
        if not within_only:
            return self.sitting_second.pop(t.name, None) if t.name in self.sat else None
        snap = self.snap
        tops = t.queue.ordered()
        h = self.strict.get(t.name)
        until = self.until[h.id] if h is not None else 0.0
        elastic_on = bool(snap.elastic)
        got = snap.verdicts.get(t.name)
        if (got is None or got[0] is not tops or got[1] != t.version or got[2] != snap.nodes_version
                or got[3] is not h or got[4] != elastic_on
                or (got[5] is not None and not (until != math.inf and snap.now + got[5] <= until))
                or (got[6] is not None and not (until == math.inf or snap.now + got[6] > until))):
            yes, no, seqs = self.judge(t, tops, h, until)
            got = snap.verdicts[t.name] = (tops, t.version, snap.nodes_version, h, elastic_on, yes, no, seqs)
        seqs = got[7]
        if seqs is None:
            return None
        self.sitting_second[t.name] = seqs[1]
        return seqs[0]

    def judge(self, t: Team, tops: list[tuple[tuple, str, tuple]], h: Workload | None, until: float,
              ) -> tuple[float | None, float | None, tuple[list[Workload], list[Workload]] | None]:
        """``verdict`` worked out: the longest expected run of the jobs looked at whose ``ends_before(until)`` held
        and the shortest of those (with one) whose did not (None: no such job), and the offers of each phase if all
        are known to fail."""
        if users.order(t) is not None:
            return None, None, None
        live = t.queue.live
        passed: set = {h.shape} if h is not None else set()
        first: list[Workload] = []
        second: list[Workload] = []
        yes: float | None = None
        no: float | None = None
        for phase in (first, second):
            for _, wid, shape in tops:
                if shape in passed:
                    continue
                w = live[wid]
                if phase is first and not quota.within_quota(t, w.itype, w.total):
                    continue  # borrows: offered in the second phase
                e = w.expected
                if h is not None and h is not w and e is not None:
                    if self.ends_before(w, until):
                        yes = e if yes is None or e > yes else yes
                    else:
                        no = e if no is None or e < no else no
                if not self.known_to_fail(w):
                    return yes, no, None
                passed.add(shape)
                phase.append(w)
        return yes, no, (first, second)

    def unsit(self) -> list[tuple[Team, Workload]]:
        """The teams sitting out this phase come back: the offers of the rounds before this one failed there; the
        teams with an offer in this round are returned with it (the first of their offers not failed)."""
        back = []
        failed, r = self.failed, self.round
        for name, t, seq in self.sitting:
            f = failed.setdefault(name, set())
            for w in seq[:r]:
                f.add(w.shape)
            self.snap.verdicts.pop(name, None)
            if r < len(seq):
                back.append((t, seq[r]))
        self.sitting = []
        return back

    def offer_of(self, t: Team, failed: set | None, borrowing: set | None,
                 at: dict[str, tuple[list, int]] | None = None) -> Workload | None:
        """The team's first job whose shape has not ``failed`` in this cycle; with ``borrowing`` (the rounds within
        quota), the first that fits its team's quota, each shape passed over for borrowing added to it (a shape that
        borrows now borrows all this phase). ``at``: where the last call found the team's offer, in the tops of its
        queue as they were (``PendingQueue.ordered``); while they are the same list (the queue unchanged), the
        search goes on from there, as every shape before it was passed over for good (``failed`` and ``borrowing``
        only grow in a phase, and an offer is failed or admitted before the next round asks)."""
        order = users.order(t)
        if order is not None:  # round-robin across users: the queue's order changes with their use
            skip = set(failed or ())
            while True:
                h = t.queue.head(skip | borrowing if borrowing is not None else skip, order)
                if h is None or borrowing is None or quota.within_quota(t, h.itype, h.total):
                    return h
                borrowing.add(h.shape)
        live = t.queue.live
        tops = t.queue.ordered()
        i = 0
        if at is not None:
            last = at.get(t.name)
            if last is not None and last[0] is tops:
                i = last[1]
        while i < len(tops):
            shape = tops[i][2]
            if (failed and shape in failed) or (borrowing is not None and shape in borrowing):
                i += 1
                continue
            w = live[tops[i][1]]
            if borrowing is not None and not quota.within_quota(t, w.itype, w.total):
                borrowing.add(shape)
                i += 1
                continue
            if at is not None:
                at[t.name] = (tops, i)
            return w
        if at is not None:
            at[t.name] = (tops, i)
        return None

    def rank_deferred(self) -> None:
        """Before a try may stop other teams' jobs (a preemption plan, an elastic shrink): give the offers deferred
        in this round (``known_to_fail`` when gathered) their place in its order. A deferred team's rank reads its own
        usage and what is fixed in the cycle, and its usage has not changed since the round gathered it (a team
        offers one job a round, and nothing was stopped before now), so the rank is the one it had then. Those
        before the offer being tried failed there, as they would have; those after it are tried in their turn,
        when the stopped jobs may have changed their team's usage."""
        if self.sitting:  # the sitting teams' offers in this round: deferred ones
            for t, w in self.unsit():
                self.deferred.append((t.name, t, w))
        if not self.deferred:
            return
        offers, at = self.offers, self.at
        cur = (offers[at][0], offers[at][1])
        later = offers[at + 1:]
        for name, t, w in self.deferred:
            r = self.rank(t, w)
            if (r, name) < cur:
                self.settled.append((name, t, w))
            else:
                later.append((r, name, t, w))
        self.deferred = []
        later.sort(key=lambda o: (o[0], o[1]))
        offers[at + 1:] = later


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
    if ok and not within and _protected(team, w) and not _harboured(snap, team, w):
        return False, False, (
            f"waiting for room within team {w.team}'s quota: preempted {w.preemptions} times, the job runs only "
            "while the team's protected jobs fit within its quota (so it is not reclaimed again)")
    return ok, within, why


def offer_rank(snap: Snapshot, team: Team, w: Workload) -> tuple:
    """The key by which a cycle orders ``w`` among the teams' offers (``fairpod explain``)."""
    return _Cycle(snap).rank(team, w)


def schedule(snap: Snapshot) -> list[Decision]:
    """Run one scheduling cycle at ``snap.now``; see the module doc."""
    return _Cycle(snap).run()
