"""A cycle's team check (``quota.team_check``, with ``protected.team_check``'s rules), once per job and usage in the
cycle, and remembered across cycles where it failed on the team's own quota or borrow limit (``Snapshot.quota_blocked``):
while what it read holds (``quota_stamp``), the same check fails the same way with the same reason
(docs/simulator.md, "What a snapshot kept across cycles remembers")."""

from __future__ import annotations

from fairpod.governance import quota
from fairpod.governance.cycle_state import CycleState
from fairpod.governance.protected import team_check
from fairpod.governance.teams import Team
from fairpod.governance.workload import Workload


class TeamChecks(CycleState):
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

