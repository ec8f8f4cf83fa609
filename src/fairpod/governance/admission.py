"""Trying one job in a cycle: it starts if its team may hold it (quota, borrow limit) and it can be placed, else
by preemption (elastic shrinks first, then reclaim, priority, fair share: ``preemption.plan``), else it waits with
the reason; a job with fallback instance types tries them in turn (``try_types``). ``admit`` records the decision
(and its victims, requeued at the end of the cycle) and who lends what a borrowing job takes (``lenders``)."""

from __future__ import annotations

from fairpod.governance import (
    borrow_priority,
    costly_reclaim,
    elastic,
    fungibility,
    groups,
    hierarchical_reclaim,
    preemption,
    quota,
    users,
)
from fairpod.governance.consolidation import moved_reason
from fairpod.governance.decisions import Admit, Preempt
from fairpod.governance.offers import Offers
from fairpod.governance.placement import place, why_not
from fairpod.governance.protected import is_protected, within_or_undo
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload


def lenders_for(snap: Snapshot, w: Workload, need: int) -> tuple[tuple[str, int], ...]:
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



def borrowed_words(lenders: list[tuple[str, int]] | tuple[tuple[str, int], ...]) -> str:
    """'john', 'john (4), smith (4)' with several lenders, 'idle capacity' with none: the borrowing reason's
    words (``fairpod.cli.output.reason_in_units`` reads them)."""
    if not lenders:
        return "idle capacity"
    if len(lenders) == 1:
        return lenders[0][0]
    return ", ".join(f"{name} ({n})" for name, n in lenders)



class Admission(Offers):
    def admit(self, w: Workload, nodes: list[str], within: bool, victims: list[tuple[Workload, str]]) -> None:
        snap = self.snap
        if snap.cost_held:
            snap.cost_held.pop(w.id, None)  # its room freed by itself while its reclaim waited
        need = quota.borrow_need(snap, w)[0]
        lenders = lenders_for(snap, w, need) if need > 0 else ()
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
        if plan is not None and not ok and (w.quota_bound or is_protected(snap.teams[w.team], w)):
            plan = within_or_undo(snap, w, plan)  # its own lower-priority jobs, only to run within quota
        if plan is not None:
            victims, nodes = plan
            self.admit(w, nodes, quota.within_quota(snap.teams[w.team], w.itype, w.total), victims)
            return True
        if (within or both) and w.id in snap.cost_held:  # it fits once its reclaim may go (a plan was found)
            self.wait(w, costly_reclaim.held_reason(snap, w))
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
            if plan is not None and not ok and (w.quota_bound or is_protected(team, w)):
                plan = within_or_undo(self.snap, w, plan)
            if plan is not None:
                victims, nodes = plan
                self.admit(w, nodes, quota.within_quota(team, w.itype, w.total), victims)
                return True
        self.wait(w, capped)
        return False

