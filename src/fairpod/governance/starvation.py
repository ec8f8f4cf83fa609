"""The starvation guard (rule 6): capacity held for a team's job that has waited too long, and what may still use it.

A team's first job that could run at all (``first_runnable``) and has waited longer than the policy's
``starvation_guard_seconds`` goes first in a cycle (``scheduler._Cycle.guard``); if it still cannot start, the nodes
nearest to having room for it (and, if it must borrow, borrowable capacity, out of what is lendable only) are held
for it (``hold``). Held capacity is backfilled with what cannot delay it: jobs expected to end before the held nodes
are expected to have room for it (``reserved_for``, by the running jobs' expected durations), and jobs of its team
that leave room for it within the team's quota or borrow limit (``team_may_start``). Nodes held for a job that must
borrow never refuse another team's job within its own quota.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Set

from fairpod.governance import budget, quota, topology, users
from fairpod.governance.nodes import Node
from fairpod.governance.ordering import PROTECTED_AFTER
from fairpod.governance.protected import entitled, is_protected, protected_use
from fairpod.governance.team_checks import TeamChecks
from fairpod.governance.teams import Team
from fairpod.governance.workload import Workload


class StarvationGuard(TeamChecks):
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
        if is_protected(team, h):
            # H waits for room beside the team's protected jobs (``harboured``): only a protected job takes it
            if w.preemptions < PROTECTED_AFTER:
                return True
            r = protected_use(self.snap, team, h.itype)
            q = team.q(h.itype)
            return all(r[d] + w.total[d] + h.total[d] <= q[d] for d in range(3))
        both = tuple(a + b for a, b in zip(w.total, h.total, strict=True))
        if entitled(team, h):
            return quota.within_quota(team, h.itype, both)
        cap = quota.borrow_cap(team, h.itype)
        u = team.u(h.itype)
        return quota.within_quota(team, w.itype, w.total) and all(u[d] + both[d] <= cap[d] for d in range(3))

    def behind(self, h: Workload) -> str:
        """Why a job of a team with a starving job ``h`` waits when it could delay ``h`` (``team_may_start``)."""
        got = self.behind_reasons.get(h.id)
        if got is None:
            got = self.behind_reasons[h.id] = (f"waiting behind job {h.id} of team {h.team}, which has waited "
                                               "longest and has capacity held for it")
        return got

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
        cap = quota.borrow_cap(team, w.itype) if not entitled(team, w) else list(team.q(w.itype))
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

