"""How an API worker wakes the core's loop after it committed submits, on SQLite (``fairpod up --api-workers N``;
on PostgreSQL the commit's ``NOTIFY`` does it, :mod:`fairpod.store.notify`).

The core makes one socket pair (Unix, datagrams) before it starts its workers: it reads one end, and each worker
inherits the other (``--wake-fd``) and sends a datagram on it after each commit that created jobs
(:class:`fairpod.server.core.worker.Poke`). No port, no token: only the processes that inherited the end can write
to it (the core passes it to its workers alone; sockets are not inherited otherwise, and the core's replicas are
started with their descriptors closed). A datagram carries the worker's pid and its waits for the database's write
lock (``store.waits``, for the core's ``/metrics``).

It replaced a ``POST /internal/wake`` to the core's private port: each wake went through the core's whole HTTP
stack, about a third of the core process's CPU at 1,000 nodes with two workers (benchmarks/README.md, "Wakes as
datagrams"). A wake that is lost (the core's queue full, the core restarting) only delays the job to the core's
next periodic turn (a quarter of a second).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable

from fairpod.store import waits

MAX_DATAGRAM = 4096  # what a wake may carry; a longer one is cut and its body ignored (the wake still counts)
DRAIN = 256  # datagrams taken at once after the first: one wake of the loop and one report per worker for them


class Wakes:
    """The core's end of the workers' wakes: :meth:`listen` wakes the loop for each datagram (a burst: once)."""

    def __init__(self) -> None:
        self.core_end, self.worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.taken = 0  # datagrams read
        self._closing = False
        self._thread: threading.Thread | None = None

    def listen(self, wake: Callable[[], None]) -> None:
        """Read the wakes in a thread of their own until :meth:`close`, calling ``wake`` for each burst."""
        self._thread = threading.Thread(target=self._run, args=(wake,), name="worker-wakes", daemon=True)
        self._thread.start()

    def _run(self, wake: Callable[[], None]) -> None:
        while True:
            try:
                got = [self.core_end.recv(MAX_DATAGRAM)]
            except OSError:
                return
            if self._closing:
                return
            for _ in range(DRAIN):  # the wakes already queued: one wake of the loop for all of them
                try:
                    got.append(self.core_end.recv(MAX_DATAGRAM, socket.MSG_DONTWAIT))
                except OSError:  # nothing more queued (BlockingIOError), or closed
                    break
            self.taken += len(got)
            wake()
            last: dict[int, object] = {}
            for body in got:  # each worker's last figures; a body not of the shape is only a wake
                try:
                    said = json.loads(body) if body else None
                except ValueError:
                    continue
                if isinstance(said, dict) and isinstance(said.get("pid"), int):
                    last[said["pid"]] = said.get("write_waits")
            for pid, figures in last.items():
                waits.report(f"worker-{pid}", figures)

    def close(self) -> None:
        self._closing = True
        try:
            self.worker_end.send(b"", socket.MSG_DONTWAIT)  # the reader wakes and sees it is closing
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.core_end.close()
        self.worker_end.close()


__all__ = ["MAX_DATAGRAM", "Wakes"]
