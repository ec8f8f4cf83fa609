"""What the core publishes for reads after each turn, so that no read waits for a turn.

The engine's snapshot is the core's memory: only the holder of the core's lock may read it, and a turn holds
that lock for as long as it runs (seconds at datacenter size). A read of the engine's figures (``explain``,
``/metrics``, the cluster's capacity, the queue positions, the usage now) goes through
:meth:`fairpod.server.core.door.Door.engine_view` with a key naming what it reads and a function of the snapshot:

- when the lock is free, the function runs on the live snapshot under the lock, taken without waiting (a
  consistent view, as of the last turn and the commands after it), and its answer is kept here;
- when a turn or a command holds the lock, the answer is the one kept here: the one the last turn published at
  its end, or a reader computed since; it is at most one turn old (its :class:`AsOf` says which turn and when);
- a key no reader asked for before has no answer yet: its first read waits for the lock (the turn that holds it
  ends; ``door.FIRST_WAIT``, 30 s, bounds it, then ``None`` and the routes answer 503 "busy"), and from then on
  every turn publishes it when it ends.

At the end of every turn, after its commit and still under the lock, the core computes again the keys read in
the last ``keep`` seconds (:meth:`Published.refresh`): the per-turn cost is that of the reads asked for lately,
not of every read the API has (a copy of the whole snapshot costs ~0.3 s at 10,000 waiting jobs). Values are
never changed once published: a reader that changes what it got copies it first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

from fairpod.governance.snapshot import Snapshot

KEEP = 60.0  # seconds a key is computed again at every turn after it was last read
MOST = 256  # keys kept at most (the least recently read go first)


class AsOf(NamedTuple):
    """Which view an answer is of: the number of the last turn it includes, and the core's clock when it was read."""

    turn: int
    at: float

    def json(self) -> dict[str, Any]:
        return {"turn": self.turn, "at": self.at}


class _Entry:
    __slots__ = ("fn", "read", "value", "as_of")

    def __init__(self, fn: Callable[[Snapshot], Any], read: float) -> None:
        self.fn = fn
        self.read = read  # time.monotonic() of its last read
        self.value: Any = None
        self.as_of: AsOf | None = None


class Published:
    """The answers kept for reads, by key (see the module's doc)."""

    def __init__(self, keep: float = KEEP, most: int = MOST) -> None:
        self.keep = keep
        self.most = most
        self._entries: dict[Hashable, _Entry] = {}
        self._lock = threading.Lock()  # guards the dict only; no function of the snapshot runs under it
        self.refresh_seconds = 0.0  # what the last turn's refresh took (benchmarks/datacenter.py reads turns)

    def get(self, key: Hashable, fn: Callable[[Snapshot], Any]) -> tuple[Any, AsOf] | None:
        """The answer kept for ``key`` (None: none yet); ``fn`` is what the next turn computes for it."""
        with self._lock:
            e = self._want(key, fn)
            return None if e.as_of is None else (e.value, e.as_of)

    def put(self, key: Hashable, fn: Callable[[Snapshot], Any], value: Any, as_of: AsOf) -> None:
        """An answer a reader computed under the core's lock."""
        with self._lock:
            e = self._want(key, fn)
            if e.as_of is None or as_of >= e.as_of:
                e.value, e.as_of = value, as_of

    def _want(self, key: Hashable, fn: Callable[[Snapshot], Any]) -> _Entry:
        now = time.monotonic()
        e = self._entries.get(key)
        if e is None:
            if len(self._entries) >= self.most:
                del self._entries[min(self._entries, key=lambda k: self._entries[k].read)]
            e = self._entries[key] = _Entry(fn, now)
        e.fn, e.read = fn, now
        return e

    def refresh(self, snap: Snapshot, as_of: AsOf) -> None:
        """The core's end of turn, under its lock: every key read in the last ``keep`` seconds computed again."""
        t0 = time.perf_counter()
        now = time.monotonic()
        with self._lock:
            for key in [k for k, e in self._entries.items() if now - e.read > self.keep]:
                del self._entries[key]
            todo = list(self._entries.items())
        for key, e in todo:
            try:
                value = e.fn(snap)
            except Exception:  # noqa: BLE001 - a read's failure is the reader's: it meets it when it computes again
                with self._lock:
                    self._entries.pop(key, None)
                continue
            with self._lock:
                if self._entries.get(key) is e:
                    e.value, e.as_of = value, as_of
        self.refresh_seconds = time.perf_counter() - t0
