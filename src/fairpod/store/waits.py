"""How long this process's write transactions waited for the database's write lock.

On SQLite a write transaction starts with ``BEGIN IMMEDIATE`` (``store.db``), which returns once this connection
holds the database's one write lock, after the busy handler's retries: its time is the wait behind the other
writers (the core's turn, an API worker's group of submits, another process). PostgreSQL's transactions wait on
the rows they write, not at their start: nothing is timed there. ``/metrics`` shows the figures as
``fairpod_store_write_wait_seconds``, per process: the core's own (``WRITE_WAITS``) and what each API worker
reported with its last wake of the core (``report``; docs/metrics.md). With API workers every writer of the home
first waits its turn among them (``store.writers.WritersTurn``): that wait is carried into its transaction's
(``carry``).
"""

from __future__ import annotations

import bisect
import threading
from typing import Any

BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
MAX_REPORTERS = 64  # processes whose figures are kept (API workers: at most 64, started again under new pids)


class Waits:
    """A histogram of waits (seconds) with the bounds of ``BUCKETS``; thread-safe."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._counts = [0] * (len(BUCKETS) + 1)  # per bucket, the last one above every bound
        self._sum = 0.0
        self._carried = threading.local()  # a wait of this thread for the lock's turn, added to its next wait

    def carry(self, seconds: float) -> None:
        """A wait before the transaction asked for the lock (its turn among a home's API workers): counted in the
        next wait this thread adds, as one transaction's wait."""
        self._carried.s = getattr(self._carried, "s", 0.0) + seconds

    def add(self, seconds: float) -> None:
        seconds += getattr(self._carried, "s", 0.0)
        self._carried.s = 0.0
        with self._mu:
            self._counts[bisect.bisect_left(BUCKETS, seconds)] += 1
            self._sum += seconds

    def figures(self) -> dict[str, Any]:
        """``{"counts": [per bucket, +Inf last], "sum": seconds}``: what a worker reports, what /metrics reads."""
        with self._mu:
            return {"counts": list(self._counts), "sum": self._sum}


WRITE_WAITS = Waits()  # this process's
_reported: dict[str, dict[str, Any]] = {}  # another process's figures as it last reported them, by its name
_mu = threading.Lock()


def report(name: str, figures: Any) -> bool:
    """Keep the figures another process (an API worker) reported under ``name``; False, nothing kept, when they
    are not of :meth:`Waits.figures`' shape."""
    if not isinstance(figures, dict):
        return False
    counts, total = figures.get("counts"), figures.get("sum")
    if (not isinstance(counts, list) or len(counts) != len(BUCKETS) + 1
            or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 2**53 for c in counts)
            or not isinstance(total, (int, float)) or isinstance(total, bool) or not 0 <= total < 1e12):
        return False
    with _mu:
        if name not in _reported and len(_reported) >= MAX_REPORTERS:
            _reported.pop(next(iter(_reported)))  # the oldest reporter (a worker ended long ago)
        _reported[name] = {"counts": list(counts), "sum": float(total)}
    return True


def every() -> list[tuple[str, dict[str, Any]]]:
    """(process, figures): this one's as ``core``, then each reporter's."""
    with _mu:
        others = sorted(_reported.items())
    return [("core", WRITE_WAITS.figures()), *others]


__all__ = ["BUCKETS", "WRITE_WAITS", "Waits", "every", "report"]
