"""Reclaim within the tree of groups (rule 3c, opt-in: ``policy.hierarchical_reclaim``; Kueue's hierarchical
reclaim, a preemptor's "hierarchical advantage").

A job J of team T that T may hold only by borrowing does not reclaim anything (rule 3 takes lent capacity back for a
job *within its team's quota*). With the rule on, where T sits in groups: if J fits within the quota of one of T's
groups beside what that group's subtree already uses (its own ``quota`` and its teams' and groups' quotas; the
nearest such group G), the teams of G's subtree are entitled to it before anyone outside G. J may then take it back
from teams outside G that borrow: jobs of a team that uses more than its quota, where every group of that team's
path below the group it shares with T uses more than its quota too (work running on its own subtree's quota is never
taken). Victims whatever their priority (as a reclaim, rule 3; D1 of docs/policies.md), together with T's own
lower-priority jobs where T may preempt them, in the victim order (other teams' borrowed work first), until J fits;
victims not needed are given back. The victims read ``reclaimed by team T for job J``. It is tried before the other
plans for J, so a group's quota is taken back before the team stops its own jobs (Kueue prefers hierarchical
candidates too). Off (the default): nothing changes.
"""

from __future__ import annotations

from fairpod.governance import groups
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Team
from fairpod.governance.workload import Workload


def inside(snap: Snapshot, team: Team, w: Workload) -> tuple[str, set[str]] | None:
    """The nearest group above ``team`` whose quota holds ``w`` beside its subtree's use, with the teams below it;
    None where no group does (or the rule is off)."""
    if not snap.hierarchical_reclaim or not team.path:
        return None
    t = w.total
    for name in team.path:
        g = snap.groups[name]
        q = groups.quota_of(snap, g, w.itype)
        u = groups.used_of(snap, g, w.itype)
        if u[0] + t[0] <= q[0] and u[1] + t[1] <= q[1] and u[2] + t[2] <= q[2]:
            return name, {x.name for x in groups.teams_below(snap, g)}
    return None


def takes(snap: Snapshot, w: Workload, v: Workload, group: str, below: set[str]) -> bool:
    """May ``w`` (whose team is entitled within ``group``, teams ``below``) take back ``v``'s capacity? ``v``'s team
    is outside the group and it, and each of its groups up to the one it shares with ``w``'s team, uses more than
    its quota."""
    if v.team in below:
        return False
    vt = snap.teams[v.team]
    if not _over(vt.u(v.itype), vt.q(v.itype)):
        return False
    mine = set(snap.teams[w.team].path)
    for name in vt.path:
        if name in mine:
            break
        g = snap.groups[name]
        if not _over(groups.used_of(snap, g, v.itype), groups.quota_of(snap, g, v.itype)):
            return False
    return True


def _over(u: tuple[int, int, int] | list[int], q: tuple[int, int, int] | list[int]) -> bool:
    return u[0] > q[0] or u[1] > q[1] or u[2] > q[2]
