"""Per-user rules inside a team (engine rule 9; a team's ``user_limits``).

- **Cap**: the jobs of one user of a team hold at most ``max_running_accelerators`` accelerators at once
  (all instance types together). A job that would take its user over the cap waits, and only that user's
  jobs of its shape wait with it: the queue keeps each user's jobs apart in a team with per-user rules.
  A job larger than the cap on its own can never start. A job over its user's cap may still start in place of
  lower-priority jobs of its team (rule 7) when stopping them brings its user within the cap: in effect, in
  place of that user's own jobs (``preemption.plan`` counts the cap in whether the job fits).
- **Round-robin**: the team's next job comes from the user who runs the fewest accelerators in the team now;
  between users running as many, from the user whose last job started longest ago (a user not served yet
  first), then the job first in the team's queue order. Jobs of equal size thus take turns between users
  instead of one user's burst going first. (The turns are the engine's memory: after a control-plane
  restart, ties start again from queue order.)

A job without a user (submitted before users were recorded) counts as the user "".
"""

from __future__ import annotations

from collections.abc import Callable

from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Team
from fairpod.governance.workload import Workload


def order(team: Team) -> Callable[[str], tuple[int, int]] | None:
    """The rank of a user for round-robin: (running accelerators, when the user's last job started: never
    first), or None: the team's plain queue order."""
    if not team.round_robin:
        return None
    acc, turn = team.user_acc, team.user_turn
    return lambda user: (acc.get(user, 0), turn.get(user, 0))


def never(team: Team, w: Workload) -> str | None:
    """Why ``w`` can never start under its team's per-user cap, or None."""
    cap = team.user_cap
    if cap is not None and w.total.acc > cap:
        return (f"the job needs {w.total.acc} accelerators, more than team {team.name}'s per-user cap of {cap}: "
                "it can never start")
    return None


def over_cap(team: Team, w: Workload) -> str | None:
    """Why starting ``w`` now would take its user over the team's per-user cap, or None if it would not."""
    cap = team.user_cap
    if cap is None:
        return None
    why = never(team, w)
    if why:
        return why
    running = team.user_acc.get(w.user, 0)
    if running + w.total.acc > cap:
        who = w.user or "(unknown user)"
        return (f"per-user cap: user {who} runs {running} accelerators in team {team.name}, the job needs "
                f"{w.total.acc} more and the cap is {cap}")
    return None


def may_displace_own(snap: Snapshot, team: Team, w: Workload) -> bool:
    """Could ``w``, over its user's cap, start in place of its user's own lower-priority jobs (rule 9.6)? Only
    if the team preempts its lower-priority jobs and those of the user, past their minimum runtime, hold at least
    the accelerators ``w`` is over the cap by."""
    cap = team.user_cap
    if cap is None or never(team, w) is not None or not (team.preempt_lower and snap.task_ranking):
        return False
    over = team.user_acc.get(w.user, 0) + w.total.acc - cap
    freeable = 0
    for v in snap.running.values():
        if (v.team == team.name and v.user == w.user and v.priority < w.priority
                and not (v.min_runtime and v.started is not None and snap.now - v.started < v.min_runtime)):
            freeable += v.total.acc
            if freeable >= over:
                return True
    return False
