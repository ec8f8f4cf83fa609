"""The one home of per-team figures on an instance type, read from the engine's snapshot: quota, in use,
borrowed (and from whom), lent. The cluster view, ``/metrics`` and the usage history all show these."""

from __future__ import annotations

from dataclasses import dataclass

from fairpod.governance import groups
from fairpod.governance.quota import lending
from fairpod.governance.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class TeamFigures:
    team: str
    instance_type: str
    quota: tuple[int, int, int]  # accelerators, millicores, MiB
    used: tuple[int, int, int]
    borrowed_from: dict[str, int]  # lender -> accelerators (``(unallocated)`` for idle capacity)
    lent: int  # accelerators of this team's quota other teams use now

    @property
    def borrowed(self) -> tuple[int, int, int]:
        """Use above quota, per resource."""
        return (max(0, self.used[0] - self.quota[0]), max(0, self.used[1] - self.quota[1]),
                max(0, self.used[2] - self.quota[2]))


def instance_types(snap: Snapshot) -> list[str]:
    """Instance types the cluster has nodes of or some team has quota on."""
    return sorted(set(snap.by_type) | {it for t in snap.teams.values() for it in t.quota})


def team_figures(snap: Snapshot, itype: str) -> list[TeamFigures]:
    """Every team (by name) that has quota on ``itype`` or uses it."""
    lend = lending(snap, itype)
    lent: dict[str, int] = {}
    for by_lender in lend.values():
        for lender, n in by_lender.items():
            lent[lender] = lent.get(lender, 0) + n
    out = []
    for name, t in sorted(snap.teams.items()):
        q, u = t.q(itype), t.u(itype)
        if not any(q) and not any(u):
            continue
        out.append(TeamFigures(name, itype, (q[0], q[1], q[2]), (u[0], u[1], u[2]), dict(lend.get(name, {})),
                               lent.get(name, 0)))
    return out


@dataclass(frozen=True, slots=True)
class GroupFigures:
    """A group's figures on an instance type: its subtree's quota and use, and what it borrows from outside."""

    group: str
    parent: str | None
    instance_type: str
    quota: tuple[int, int, int]
    used: tuple[int, int, int]
    weight: int
    teams: tuple[str, ...]  # every team below it

    @property
    def borrowed(self) -> tuple[int, int, int]:
        return (max(0, self.used[0] - self.quota[0]), max(0, self.used[1] - self.quota[1]),
                max(0, self.used[2] - self.quota[2]))


def group_figures(snap: Snapshot, itype: str) -> list[GroupFigures]:
    """Every group, parents before children, whose subtree has quota on ``itype`` or uses it."""
    out = []
    for name in _top_down(snap):
        g = snap.groups[name]
        q, u = groups.quota_of(snap, g, itype), groups.used_of(snap, g, itype)
        if not any(q) and not any(u):
            continue
        out.append(GroupFigures(name, g.parent, itype, (q[0], q[1], q[2]), (u[0], u[1], u[2]), g.weight,
                                tuple(sorted(t.name for t in groups.teams_below(snap, g)))))
    return out


def _top_down(snap: Snapshot) -> list[str]:
    out: list[str] = []

    def visit(name: str) -> None:
        out.append(name)
        for c in snap.groups[name].children:
            visit(c)

    for name, g in snap.groups.items():
        if g.parent is None:
            visit(name)
    return out
