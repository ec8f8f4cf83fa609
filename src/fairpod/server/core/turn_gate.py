"""The reconcile turn goes first: a gate in front of the control plane's lock for frequent API writes.

The lock is not fair: when it is released, any waiting thread may take it. Under load dozens of submits
queue on it, and the reconcile turn (which collects exits and starts jobs on the slots they freed) would wait
behind all of them, one after the other. With the gate the turn announces itself (``turn()``) before it
takes the lock; a submit that arrives meanwhile waits at the gate (``yield_to_turn()``, bounded) instead of
queueing on the lock, so the turn waits for the one holder at most. Correctness does not depend on it: it
only orders who takes the lock next.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

MAX_YIELD_S = 0.5  # a submit never waits at the gate longer than this (then it queues on the lock as before)


class TurnGate:
    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._wanting = 0

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Around taking the lock for a turn: others yield until the block ends."""
        with self._cond:
            self._wanting += 1
        try:
            yield
        finally:
            with self._cond:
                self._wanting -= 1
                if not self._wanting:
                    self._cond.notify_all()

    def yield_to_turn(self, timeout: float = MAX_YIELD_S) -> None:
        """Wait while a turn waits for the lock (at most ``timeout`` seconds)."""
        if not self._wanting:  # the common case costs no lock
            return
        with self._cond:
            self._cond.wait_for(lambda: not self._wanting, timeout)
