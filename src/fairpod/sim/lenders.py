"""Who borrows from whom on one instance type, kept up to date by the change of one team's usage at a time.

``quota.lending`` attributes borrowing to lenders from scratch: borrowers in name order each take from the lender with
the most idle quota (ties by name; unallocated capacity first), the rest of a take from the next. The simulator asks
after every cycle that changed the type's usage, and a datacenter's type has ~50 teams with quota, so recounting
every team's idle quota each time was most of the simulator's own time. ``Book`` keeps what the attribution starts
from instead: the lenders sorted by idle quota and the borrowers by name, each moved when its team's usage changes
(``update``). ``attribute`` then runs the same takes, reading only the lenders it takes from: the lenders not taken
from yet are the sorted list's tail, the rest of a lender taken from in part waits in a small heap, and the next
lender is the first of the two (the one a heap of all the lenders would give). Without groups only: with a tree of
groups the nearest lender goes first, and the simulator asks ``quota.lending``.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort

from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Team

UNALLOCATED = "(unallocated)"


class Book:
    """One instance type's lenders (idle quota each lends now) and borrowers (accelerators above quota)."""

    __slots__ = ("itype", "idle", "lenders", "over", "borrowers")

    def __init__(self, itype: str) -> None:
        self.itype = itype
        self.idle: dict[str, int] = {}  # lender -> accelerators it lends now (> 0)
        self.lenders: list[tuple[int, str]] = []  # (-idle, name), sorted: the most idle first, then by name
        self.over: dict[str, int] = {}  # borrower -> accelerators it uses above its quota (> 0)
        self.borrowers: list[str] = []  # sorted by name

    def update(self, team: Team) -> None:
        """Bring ``team``'s place in the book up to date with its usage now."""
        it, name = self.itype, team.name
        used = team.used.get(it)
        u = used[0] if used is not None else 0
        q = team.q(it)[0]
        left = 0
        if team.lends:  # ``quota.lending``'s idle quota: its quota left, at most its lending limit
            left = q - u
            limit = team.lend_limit.get(it)
            if limit is not None and limit[0] < left:
                left = limit[0]
        was = self.idle.get(name, 0)
        if left != was:
            if was > 0:
                del self.lenders[bisect_left(self.lenders, (-was, name))]
                del self.idle[name]
            if left > 0:
                insort(self.lenders, (-left, name))
                self.idle[name] = left
        over = u - q
        had = self.over.get(name, 0)
        if over != had and (over > 0 or had > 0):
            if had <= 0:
                insort(self.borrowers, name)
            if over > 0:
                self.over[name] = over
            else:
                del self.over[name]
                del self.borrowers[bisect_left(self.borrowers, name)]

    def attribute(self, snap: Snapshot) -> dict[str, int]:
        """What each team lends now of this type (accelerators; teams that lend none left out): ``quota.lending``'s
        takes, summed per lender in ``snap.teams`` (unallocated capacity is nobody's)."""
        lent: dict[str, int] = {}
        if not self.borrowers:
            return lent
        pushed: list[tuple[bool, int, str]] = []  # lenders taken from in part: (not unallocated, -left, name)
        if snap.idle_sharing:
            ua = snap.unallocated(self.itype)[0]
            if ua > 0:
                pushed.append((False, -ua, UNALLOCATED))
        tail = self.lenders
        i, n = 0, len(tail)
        for name in self.borrowers:
            over = self.over[name]
            while over > 0:
                if pushed and (i >= n or pushed[0] < (True, tail[i][0], tail[i][1])):
                    first, neg, lender = heapq.heappop(pushed)
                elif i < n:
                    neg, lender = tail[i]
                    first = True
                    i += 1
                else:
                    break  # no lender left: the rest is (unallocated), nobody's
                take = min(over, -neg)
                if lender in snap.teams:
                    lent[lender] = lent.get(lender, 0) + take
                over -= take
                if take < -neg:
                    heapq.heappush(pushed, (first, neg + take, lender))
        return lent
