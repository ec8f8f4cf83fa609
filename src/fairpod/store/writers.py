"""Turns at a SQLite database's one write lock among the processes of one home (``fairpod up --api-workers``).

SQLite lets one transaction write at a time (``BEGIN IMMEDIATE``, ``store.db``), and a writer that finds the lock
taken sleeps and polls (its busy handler: 1, 2, 5, 10, 15, 20, 25 ms … apart): the lock often lay free while a
waiter slept, and under a steady flow of submits the core's turn, polling against two API workers that handed the
lock to each other, waited up to ~0.5 s to commit (benchmarks/README.md, "The core's turn at the write lock").
:class:`WritersTurn` is an exclusive ``flock`` on a file of the home, taken before ``BEGIN IMMEDIATE`` and let go
after the commit: a waiter sleeps in the kernel and wakes when the holder lets go. Every writer of the home takes
it (the core's store and each API worker's, ``Store.turn``), so they meet here and not in the busy handler; a
process that dies lets its turn go with its descriptor. PostgreSQL has none: its transactions wait on rows.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from fairpod.store.waits import WRITE_WAITS

LOCK_FILE = "submit-writers.lock"  # in the home (its name from when only the API workers took it)


class WritersTurn:
    """One write transaction at a time among the processes that share ``path``; re-entrant within a thread (a write
    inside a write waits for nothing more), one thread of this process at a time."""

    def __init__(self, path: Path, patience: float = 30.0) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.patience = patience  # seconds a thread waits for another of this process (SQLite's busy timeout)
        self._mu = threading.RLock()  # flock is the process's: its threads take turns here first
        self._depth = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        t0 = time.perf_counter()
        if not self._mu.acquire(timeout=self.patience):
            # another thread of this process holds the turn that long: whatever it waits for, this transaction
            # meets it at SQLite's lock as before the turns, whose busy timeout ends the wait with an error
            WRITE_WAITS.carry(time.perf_counter() - t0)
            yield
            return
        try:
            self._depth += 1
            if self._depth == 1:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
                WRITE_WAITS.carry(time.perf_counter() - t0)  # the transaction's wait for the lock begins here
            try:
                yield
            finally:
                if self._depth == 1:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._depth -= 1
            self._mu.release()


def writers_turn(home: Path) -> WritersTurn:
    return WritersTurn(Path(home) / LOCK_FILE)


__all__ = ["LOCK_FILE", "WritersTurn", "writers_turn"]
