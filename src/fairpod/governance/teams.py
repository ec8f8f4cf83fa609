"""A team as the engine sees it (``Team``: quota, sharing and limits, usage, queue) and a node of the tree of
groups (``Group``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fairpod.governance.lending import idle_lendable
from fairpod.governance.pending import PendingQueue
from fairpod.governance.workload import Vec
from fairpod.model.resources import Res


@dataclass(slots=True, eq=False)
class Team:
    name: str
    weight: int = 0
    lends: bool = True
    borrows: bool = True
    borrow_limit: int = 50  # percent of quota
    preempt_lower: bool = True
    preempt_newer: bool = False  # also its equal-priority jobs submitted later (``within_team``)
    quota: dict[str, Res] = field(default_factory=dict)
    lend_limit: dict[str, Res] = field(default_factory=dict)  # per instance type; none: all idle quota is lent
    borrow_abs: dict[str, Res] = field(default_factory=dict)  # absolute borrow limit per instance type
    user_cap: int | None = None  # accelerators one user's jobs may run at once in this team
    round_robin: bool = False  # the queue goes round-robin across users (fewest running accelerators first)
    used: dict[str, Vec] = field(default_factory=dict)
    user_acc: dict[str, int] = field(default_factory=dict)  # running accelerators per user
    user_turn: dict[str, int] = field(default_factory=dict)  # per user: the count of starts at its last start
    history: dict[str, float] = field(default_factory=dict)  # decayed mean dominant borrowed share per type
    # per instance type: (accelerator-hours used this period, budget, hard cap), set by the caller (``budget``)
    budget: dict[str, tuple[float, float, bool]] = field(default_factory=dict)
    version: int = 0  # counts changes of its usage (derived views may be cached against it)
    queue: PendingQueue = field(default_factory=lambda: PendingQueue())
    path: tuple[str, ...] = ()  # its group and that group's ancestors, nearest first (``governance.groups``)

    def q(self, itype: str) -> Res:
        return self.quota.get(itype, _ZERO)

    def u(self, itype: str) -> Vec:
        v = self.used.get(itype)
        if v is None:
            v = self.used[itype] = [0, 0, 0]
        return v

    def lendable_now(self, itype: str) -> tuple[int, int, int]:
        """What this team lends of ``itype`` now (0 if it does not lend): idle quota up to its lending limit."""
        if not self.lends:
            return 0, 0, 0
        return idle_lendable(self.q(itype), self.u(itype), self.lend_limit.get(itype))

    @property
    def per_user(self) -> bool:
        """Whether the team has per-user rules (its queue then keeps each user's jobs apart)."""
        return self.user_cap is not None or self.round_robin


_ZERO = Res(0, 0, 0)


@dataclass(slots=True, eq=False)
class Group:
    """A node of the tree of groups (``governance.groups``): teams and groups below it share its quota, the sum of
    theirs, and it lends and borrows for all of them towards the rest of the tree."""

    name: str
    parent: str | None = None
    weight: int = 1
    lends: bool = True
    borrows: bool = True
    borrow_limit: int = 50  # percent of the group's quota
    lend_limit: dict[str, Res] = field(default_factory=dict)
    borrow_abs: dict[str, Res] = field(default_factory=dict)
    teams: list[str] = field(default_factory=list)  # the teams directly below it
    children: list[str] = field(default_factory=list)  # the groups directly below it
    quota: dict[str, Res] = field(default_factory=dict)  # what it holds itself (not its teams'), per instance type
