"""One scheduling cycle over a snapshot: the governance engine.

``schedule(snap)`` looks at the pending jobs, admits what the rules allow, plans preemptions, and returns
the decisions. It reads no clock (``snap.now`` is the time) and does no I/O; it leaves ``snap`` in the
state after its decisions (admitted jobs running, victims back in their queues).

The cycle is one object built in levels, each in the module of what it adds (``cycle_state`` says which):
``starvation`` (step 1's holds and backfill), ``verdicts`` (what is known to fail, kept across cycles),
``offers`` (the rounds' order), ``admission`` (one job's try); this module runs the steps.

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
   tried, and keeps its turn (docs/simulator.md, "What a snapshot kept across cycles remembers"); so is a job
   behind its team's starving job that already waits with that reason. A team all of whose offers are known to
   fail sits the rounds out (``verdict``, kept across cycles while what it read is unchanged).
   In a team with per-user rules (rule 9, ``users``) a job over its user's cap waits without trying, and a
   RoundRobin team offers the job of the user who runs the fewest accelerators first.
Under FairShareHistory (rule 5b, ``history``) the cycle first folds the time since the last cycle into each
team's decayed borrowed share, and records the shares after its decisions.
"""

from __future__ import annotations

import math

from fairpod.governance import aging, elastic, history
from fairpod.governance.admission import Admission
from fairpod.governance.consolidation import OFF, consolidate
from fairpod.governance.decisions import Decision, displaced_reason
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Team


class _Cycle(Admission):
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


def schedule(snap: Snapshot) -> list[Decision]:
    """Run one scheduling cycle at ``snap.now``; see the module doc."""
    return _Cycle(snap).run()

