"""What a cycle knows will fail without trying it, and the teams that sit the rounds out, kept across cycles.

``known_to_fail``: a job whose try would fail now and change nothing (it already waits with that reason), either
behind its team's starving job or on its team's own quota or borrow limit remembered by ``team_checks``. ``verdict``:
a team all of whose offers in a phase of the rounds are known to fail sits it out; the verdict is kept on the
snapshot (``Snapshot.verdicts``) while what it read is unchanged, and ``unsit`` brings the team back when something
it read may have changed (docs/simulator.md, "What a snapshot kept across cycles remembers"). None of it changes a
decision (``tests/governance/test_rounds.py``).
"""

from __future__ import annotations

import math

from fairpod.governance import quota, users
from fairpod.governance.starvation import StarvationGuard
from fairpod.governance.teams import Team
from fairpod.governance.workload import Workload


class Verdicts(StarvationGuard):
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

