"""Wakes through the database (PostgreSQL ``LISTEN/NOTIFY``): a process that commits a submit the core did not write
(an API worker of ``fairpod up --api-workers N``, ``fairpod api`` on another host) sends a notification on
:data:`SUBMITS` inside its transaction (:meth:`fairpod.store.lookups.JobLookupOps.notify`), so PostgreSQL delivers it on
the commit and never for a rolled-back one; the core (the leader under ``--ha``) listens on a connection of its own
(:class:`Listener`) and wakes its loop. No HTTP between the processes, no bus of our own: the database is the queue.

A notification lost while the listener's connection is down only delays a job to the core's next periodic turn
(the core takes in what was committed by ``seq``, not by notification: :mod:`fairpod.server.core.foreign`); the
listener connects again with a bounded backoff and wakes the loop once it listens again (what was committed while
it did not is taken at that turn).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sqlalchemy.engine import make_url

log = logging.getLogger("fairpod.store.notify")
SUBMITS = "fairpod_submits"  # the channel: a submit committed by a process other than the core
BACKOFF = (0.1, 5.0)  # seconds between attempts to listen again: from the first, doubling up to the second


def conninfo(url: str) -> str:
    """The libpq URI of a SQLAlchemy PostgreSQL URL (``postgresql+psycopg://…`` → ``postgresql://…``)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class Listener:
    """A thread that LISTENs on ``channel`` of the PostgreSQL database at ``url`` and calls ``wake()`` for each
    notification as it arrives, and once each time it (re)starts listening. :meth:`stop` ends it (within ``poll``)."""

    def __init__(self, url: str, wake: Callable[[], None], channel: str = SUBMITS, poll: float = 0.5) -> None:
        self._info, self._wake, self._channel, self._poll = conninfo(url), wake, channel, poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"listen-{channel}", daemon=True)
        self.connects = 0  # times it started listening (1 + reconnections)
        self.notified = 0  # notifications received
        self.listening = threading.Event()  # set while the LISTEN is in force (tests and /healthz-like probes)
        self.pid: int | None = None  # the backend's process id while listening (pg_stat_activity)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._poll + 5.0)

    def _run(self) -> None:
        delay = BACKOFF[0]
        while not self._stop.is_set():
            try:
                self._listen()
                delay = BACKOFF[0]
            except Exception as e:  # noqa: BLE001 - a dropped connection or a database down: listen again later
                if self.listening.is_set():
                    delay = BACKOFF[0]
                self.listening.clear()
                self.pid = None
                log.warning("not listening for submits on %s (%s); again in %.1f s, the periodic turn meanwhile",
                            self._channel, str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__,
                            delay)
                self._stop.wait(delay)
                delay = min(BACKOFF[1], delay * 2)

    def _listen(self) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self._info, autocommit=True, connect_timeout=5,
                             application_name="fairpod-listen") as conn:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
            self.pid = conn.info.backend_pid
            self.connects += 1
            self._wake()  # what was committed while this did not listen is taken at this turn
            self.listening.set()
            while not self._stop.is_set():
                for _ in conn.notifies(timeout=self._poll):  # each as it comes (the generator runs to its timeout)
                    self.notified += 1
                    self._wake()
                if conn.closed or conn.broken:
                    raise psycopg.OperationalError("the connection closed")
            self.listening.clear()


__all__ = ["BACKOFF", "SUBMITS", "Listener", "conninfo"]
