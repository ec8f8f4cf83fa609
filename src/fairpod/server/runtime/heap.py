"""The server's heap and Python's cycle collector.

A control plane at datacenter size keeps hundreds of thousands of long-lived objects: the engine's snapshot, the
jobs' records, the runs. CPython's cycle collector walks every tracked object at each full (generation 2)
collection, with the GIL held, so every request and the reconcile turn wait for it: at a restart with 20,000 jobs
its full collections were a third of the time to the first turn (``benchmarks/recovery.py``), and at 10,000 nodes
one walk takes seconds. So:

- :func:`building` keeps the collector off while the memory is built from the store (a restart creates all of it
  at once, and each full collection it set off walked everything built so far);
- :func:`settle` then collects once and freezes what is alive (``gc.freeze``): later collections leave it out.
  A frozen object that is no longer used is still freed by its reference count; only a reference cycle among
  frozen objects waits for the next settle;
- :class:`Heap`, a keeper of the reconcile loop: after a full collection that took longer than ``long``
  seconds (what was added since the last freeze, new jobs, has grown), what survived it is frozen as well, so
  the next full collection walks only what is newer; and every ``every`` seconds it settles again (with
  ``gc.unfreeze`` first, so that cycles among frozen objects are collected then);
- :data:`PAUSES` times every collection, per generation, for ``/metrics`` (``fairpod_gc_pause_seconds``);
- :data:`THRESHOLDS`: the collector runs less often than Python's default (why: there).
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class Pauses:
    """Collections and their time per generation since this process started (a ``gc.callbacks`` hook). No
    lock: a collection may start in any thread at any allocation, also in one that holds such a lock (a
    deadlock); collections never run two at a time, so the hook is the only writer, and a reader may at worst
    see one collection's count before its seconds."""

    def __init__(self) -> None:
        self._started = 0.0
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = 0.0
        self.last_full = 0.0  # seconds of the latest full (generation 2) collection

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._started = now
            return
        took = now - self._started
        g = min(int(info.get("generation", 2)), 2)
        self.count[g] += 1
        self.seconds[g] += took
        self.longest = max(self.longest, took)
        if g == 2:
            self.last_full = took

    def figures(self) -> tuple[list[int], list[float], float]:
        return list(self.count), list(self.seconds), self.longest


PAUSES = Pauses()
# A young collection after 10,000 allocations rather than Python's 700, an older one after 20 young ones rather
# than 10: a turn at 10,000 nodes keeps large temporary structures alive while it allocates, and each collection
# while they live walked them and moved them to an older generation, which made full collections due (24 in a
# 30 s window, 3.2 s, and 5.3 s of collections in all, of the core's 14.4 s of CPU); with these, 0 full and 1.1 s
# in all (benchmarks/README.md, "The cycle collector's thresholds").
THRESHOLDS = (10_000, 20, 10)


def watch() -> None:
    """Time every collection of this process into :data:`PAUSES` (once; ``fairpod up`` calls it), and set the
    collector's thresholds: :data:`THRESHOLDS`, or ``FAIRPOD_GC_THRESHOLDS`` (``N0,N1,N2``, as
    ``gc.set_threshold`` takes them) when given."""
    if PAUSES not in gc.callbacks:
        gc.callbacks.append(PAUSES)
    gc.set_threshold(*thresholds(os.environ.get("FAIRPOD_GC_THRESHOLDS")))


def thresholds(given: str | None) -> tuple[int, int, int]:
    """The collector's thresholds ``given`` (``N0,N1,N2``), or :data:`THRESHOLDS`; one line if malformed."""
    if not given:
        return THRESHOLDS
    try:
        n = tuple(int(x) for x in given.split(","))
    except ValueError:
        n = ()
    if len(n) != 3 or not all(1 <= x <= 10_000_000 for x in n):
        raise SystemExit(f"fairpod: error: FAIRPOD_GC_THRESHOLDS must be three whole numbers from 1 to 10000000 "
                         f"separated by commas (as gc.set_threshold takes them), not {given!r}")
    return n[0], n[1], n[2]


def app_built() -> str:
    """Freeze what an API process's app built (:func:`settle`); the line its log says it with."""
    took = settle()
    return (f"cycle collector thresholds {','.join(map(str, gc.get_threshold()))}; "
            f"{gc.get_freeze_count()} objects of the app frozen in {took:.2f} s")


@contextmanager
def building() -> Iterator[None]:
    """No cycle collection inside (the memory being built from the store); as it was after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def settle() -> float:
    """Collect everything (frozen objects too), then freeze what is alive; the seconds it took."""
    t0 = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return time.perf_counter() - t0


class Heap:
    """The keeper (see the module doc): freeze after a full collection longer than ``long`` seconds (timed by
    ``pauses``); :func:`settle` every ``every`` seconds of ``clock``, the first ``every`` after it was made."""

    def __init__(self, every: float = 3600.0, long: float = 0.05, clock: Callable[[], float] = time.monotonic,
                 pauses: Pauses = PAUSES) -> None:
        self.every = every
        self.long = long
        self.clock = clock
        self.pauses = pauses
        self.next = clock() + every
        self.settled = 0
        self.frozen = 0

    def tick(self, cp: Any = None) -> None:
        if self.clock() >= self.next:
            settle()
            self.settled += 1
            self.next = self.clock() + self.every
        elif self.pauses.last_full > self.long:
            self.pauses.last_full = 0.0
            gc.freeze()  # the full collection just walked them: what survived it is left out from now on
            self.frozen += 1
