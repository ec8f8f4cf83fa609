"""The offers of a round: each team's next job (``offer_of``) and the order in which the teams' offers are tried
(``rank``: within quota first, then the lowest share after admission under FairShare, level by level with groups,
then priority, then submit time), and the deferred offers ranked before a try that may stop jobs
(``rank_deferred``)."""

from __future__ import annotations

from fairpod.governance import budget, fairshare, groups, quota, users
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Team
from fairpod.governance.verdicts import Verdicts
from fairpod.governance.workload import Workload


class Offers(Verdicts):
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


def offer_rank(snap: Snapshot, team: Team, w: Workload) -> tuple:
    """The key by which a cycle orders ``w`` among the teams' offers (``fairpod explain``)."""
    return Offers(snap).rank(team, w)
