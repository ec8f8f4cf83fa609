"""Who borrows and lends how much, over a replay: per instance type, brought up to date only for the types whose
usage a cycle changed (``sample``), summed over types per team and integrated over time (``integrate``) into the
result's borrowed and lent accelerator-seconds; and the timeline of allocated and borrowed accelerators per team,
when it is recorded."""

from __future__ import annotations

from fairpod.governance.quota import lending
from fairpod.governance.snapshot import Snapshot
from fairpod.sim.jobs import SimResult
from fairpod.sim.lenders import Book


class Ledger:
    """The borrowing and lending of one replay (see the module doc)."""

    def __init__(self, snap: Snapshot, result: SimResult, team_names: list[str], record_timeline: bool) -> None:
        self.snap = snap
        self.result = result
        self.team_names = team_names
        self.record_timeline = record_timeline
        self.sampled: tuple[int, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] | None = None
        # who borrows from whom, kept per instance type and brought up to date only for the types whose usage a
        # cycle changed: without groups a ``lenders.Book`` per type, moved by the change of each team whose usage
        # changed; with groups recomputed from the teams that can take part (quota on the type, or jobs running on
        # it). The sums over types per team (no zeros) are what is integrated over time.
        self.cache: dict[tuple, tuple[dict[str, int], dict[str, int]]] = {}
        self.by_type: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
        self.borrow_sum: dict[str, int] = {}
        self.lend_sum: dict[str, int] = {}
        self.dirty: dict[str, set[str]] = {}  # instance type -> teams whose usage of it changed since the last sample
        self.running_on: dict[str, dict[str, int]] = {}  # instance type -> team -> jobs running on it
        self.itypes = sorted(snap.pools)
        self.quota_teams = {it: frozenset(t.name for t in snap.teams.values() if t.q(it)[0] > 0)
                            for it in self.itypes}
        self.books: dict[str, Book] = {}
        if not snap.groups:
            for it in self.itypes:
                book = self.books[it] = Book(it)
                for name in sorted(self.quota_teams[it]):
                    book.update(snap.teams[name])

    def started(self, itype: str, team: str) -> None:
        """A job of ``team`` started on ``itype``."""
        on = self.running_on.setdefault(itype, {})
        on[team] = on.get(team, 0) + 1
        self.dirty.setdefault(itype, set()).add(team)

    def stopped(self, itype: str, team: str) -> None:
        """A job of ``team`` on ``itype`` stopped."""
        on = self.running_on[itype]
        on[team] -= 1
        if not on[team]:
            del on[team]
        self.dirty.setdefault(itype, set()).add(team)

    def sample(self, t: float) -> None:
        """Bring who borrows and lends how much up to date (and the timeline, when it is recorded)."""
        if self.dirty:
            for it, teams in self.dirty.items():
                self.lend_type(it, teams)
            self.dirty.clear()
        if self.record_timeline:
            self.record(t)

    def lend_type(self, it: str, teams: set[str]) -> None:
        snap = self.snap
        book = self.books.get(it)
        if book is not None:  # no groups: move the teams whose usage changed, then the takes
            for name in teams:
                book.update(snap.teams[name])
            self.set_type(it, (dict(book.over), book.attribute(snap)))
            return
        names = sorted({*self.quota_teams.get(it, ()), *self.running_on.get(it, {})})
        key = (it, tuple(names), tuple(snap.teams[n].used[it][0] if it in snap.teams[n].used else 0 for n in names))
        got = self.cache.get(key)
        if got is None:
            borrowed: dict[str, int] = {}
            lent: dict[str, int] = {}
            for borrower, lenders in lending(snap, it, names).items():
                for lender, n in lenders.items():
                    borrowed[borrower] = borrowed.get(borrower, 0) + n
                    if lender in snap.teams:
                        lent[lender] = lent.get(lender, 0) + n
            if len(self.cache) >= 8192:
                self.cache.clear()
            got = self.cache[key] = (borrowed, lent)
        self.set_type(it, got)

    def set_type(self, it: str, got: tuple[dict[str, int], dict[str, int]]) -> None:
        """Who borrows and lends how much of ``it`` now: into the sums over types."""
        old = self.by_type.get(it)
        if old is got:
            return
        for new, was, total in ((got[0], old[0] if old else {}, self.borrow_sum),
                                (got[1], old[1] if old else {}, self.lend_sum)):
            for name, n in was.items():
                total[name] -= n
                if not total[name]:
                    del total[name]
            for name, n in new.items():
                total[name] = total.get(name, 0) + n
        self.by_type[it] = got

    def record(self, t: float) -> None:
        """The timeline's point at ``t``: accelerators allocated and borrowed per team (teams in spec order)."""
        snap = self.snap
        cached = self.sampled
        if cached is not None and cached[0] == snap.version:
            out = cached[1]
            tl = self.result.timeline
            if not tl or tl[-1][1] != out[0] or tl[-1][2] != out[1]:
                tl.append((t, out[0], out[1]))
            return
        teams = [snap.teams[name] for name in self.team_names]
        alloc = tuple(sum(v[0] for v in tm.used.values()) for tm in teams)
        borrowed = tuple(self.borrow_sum.get(name, 0) for name in self.team_names)
        lent = tuple(self.lend_sum.get(name, 0) for name in self.team_names)
        out = (alloc, borrowed, lent)
        self.sampled = (snap.version, out)
        tl = self.result.timeline
        if tl and tl[-1][0] == t:
            tl.pop()
        if not tl or tl[-1][1] != out[0] or tl[-1][2] != out[1]:
            tl.append((t, out[0], out[1]))

    def integrate(self, dt: float) -> None:
        if dt <= 0:
            return
        res = self.result
        for name, n in self.borrow_sum.items():
            res.borrowed[name] += n * dt
        for name, n in self.lend_sum.items():
            res.lent[name] += n * dt
