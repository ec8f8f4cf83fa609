"""A team's queue of pending jobs (``PendingQueue``): one heap per job shape, merged in queue order on the fly, so
a cycle finds each shape's first job without looking at the rest."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import Any

from fairpod.governance.workload import Workload


class PendingQueue:
    """One team's pending jobs, one heap per job shape, merged on the fly in queue order.

    A job's key never changes, so a preempted job re-enters at its original place.
    """

    __slots__ = ("changes", "heaps", "live", "tops")

    def __init__(self) -> None:
        self.heaps: dict[tuple, list[tuple[tuple, str]]] = {}
        self.live: dict[str, Workload] = {}
        # the first job of each shape in queue order, (key, job id, shape); None once the queue changed: a cycle
        # asks for the head of each team's queue round after round, and most queues change far less often
        self.tops: list[tuple[tuple, str, tuple]] | None = None
        self.changes = 0  # counts pushes and removals, so readers can keep a copy while it stays (server.core.facts)

    def __len__(self) -> int:
        return len(self.live)

    def users(self) -> set[str]:
        return {w.user for w in self.live.values()}

    def push(self, w: Workload, key: tuple) -> None:
        self.tops = None
        self.changes += 1
        self.live[w.id] = w
        heapq.heappush(self.heaps.setdefault(w.shape, []), (key, w.id))

    def discard(self, wid: str) -> Workload | None:
        self.tops = None
        self.changes += 1
        return self.live.pop(wid, None)  # its heap entry is dropped lazily

    def _top(self, shape: tuple) -> tuple[tuple, str] | None:
        h = self.heaps[shape]
        while h and h[0][1] not in self.live:
            heapq.heappop(h)
        if not h:
            del self.heaps[shape]
            return None
        return h[0]

    def head(self, skip: set | None = None, user_rank: Callable[[str], tuple] | None = None) -> Workload | None:
        """The first job in queue order whose shape is not in ``skip``; with ``user_rank`` (round-robin across
        users, ``governance.users``), the job of the user with the lowest rank first, then by queue order."""
        if user_rank is None:
            for _, wid, shape in self.ordered():
                if not skip or shape not in skip:
                    return self.live[wid]
            return None
        best: tuple[Any, ...] | None = None
        for shape in list(self.heaps):
            if skip and shape in skip:
                continue
            got = self._top(shape)
            if got is None:
                continue
            top: tuple[Any, ...] = got if user_rank is None else (user_rank(self.live[got[1]].user), *got)
            if best is None or top < best:
                best = top
        return self.live[best[-1]] if best else None

    def ordered(self) -> list[tuple[tuple, str, tuple]]:
        """The first job of each shape in queue order: (key, job id, shape); kept until the queue changes."""
        tops = self.tops
        if tops is None:
            tops = self.tops = sorted((*top, shape) for shape in list(self.heaps)
                                      for top in (self._top(shape),) if top is not None)
        return tops

    def heads(self) -> Iterator[Workload]:
        """The first job of each shape."""
        for shape in list(self.heaps):
            top = self._top(shape)
            if top is not None:
                yield self.live[top[1]]

    def pop(self, w: Workload) -> None:
        self.tops = None
        self.changes += 1
        self.live.pop(w.id, None)
        if w.shape in self.heaps:  # (a job starting on a fallback instance type is queued under its first)
            self._top(w.shape)  # drop it from its heap if on top

    def position(self, wid: str) -> int | None:
        """The 1-based place of ``wid`` in :meth:`in_order` without sorting (O(n)); None if not queued. Safe to
        call from another thread while the engine runs: it reads copies of the heaps."""
        if wid not in self.live:
            return None
        entries = [e for h in list(self.heaps.values()) for e in list(h)]
        mine = min((e for e in entries if e[1] == wid), default=None)
        if mine is None:
            return None
        return 1 + len({e[1] for e in entries if e < mine and e[1] != wid and e[1] in self.live})

    def in_order(self) -> Iterator[Workload]:
        """All pending jobs in queue order (for reports; O(n log n))."""
        entries = sorted(e for h in self.heaps.values() for e in h if e[1] in self.live)
        seen: set[str] = set()
        for _, wid in entries:
            if wid not in seen:
                seen.add(wid)
                yield self.live[wid]
