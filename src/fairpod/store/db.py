"""Engine and transaction plumbing.

SQLite: WAL journal, ``synchronous`` FULL by default (NORMAL is also safe against a killed process, FULL
also against a power cut), foreign keys on, a busy timeout, and transactions that write start with
``BEGIN IMMEDIATE`` so two writers queue on the busy timeout instead of failing with "database is locked"
when one upgrades a read lock (each one's wait timed: ``store.waits``). Read-only transactions use a plain
deferred ``BEGIN`` and never block writers (WAL readers see a snapshot).

PostgreSQL: the driver's defaults (READ COMMITTED); the URL names the driver, e.g.
``postgresql+psycopg://user:pw@host/db``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from fairpod.store.waits import WRITE_WAITS

WRITE_OPTION = "fairpod_write"
SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


def make_engine(
    url: str, *, synchronous: str = "FULL", busy_timeout_ms: int = 30_000, echo: bool = False
) -> Engine:
    """One Engine per Store; it is thread-safe and pools connections."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        # a database cut off by the network: a connection attempt gives up after 10 s instead of the TCP timeout
        # (minutes), so an outage is seen and said (fairpod.server.keepers.outage) and the API answers 503 in time
        connect = {"connect_timeout": 10} if u.get_backend_name() == "postgresql" else {}
        return create_engine(u, echo=echo, pool_pre_ping=True, future=True, connect_args=connect)
    sync = synchronous.upper()
    if sync not in SYNCHRONOUS_MODES:
        raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, not {synchronous!r}")
    db = u.database or ""
    memory = db in ("", ":memory:") or u.query.get("mode") == "memory"
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
    if memory:
        kwargs["poolclass"] = StaticPool  # one shared connection, or every session would see an empty DB
    elif not db.startswith("file:"):
        Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(u, echo=echo, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # the driver must not BEGIN on its own; _on_begin does it
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            if not memory:
                cur.execute("PRAGMA journal_mode = WAL")
            cur.execute(f"PRAGMA synchronous = {sync}")
            cur.execute("PRAGMA foreign_keys = ON")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if not conn.get_execution_options().get(WRITE_OPTION, False):
            conn.exec_driver_sql("BEGIN")
            return
        t0 = time.perf_counter()
        conn.exec_driver_sql("BEGIN IMMEDIATE")
        WRITE_WAITS.add(time.perf_counter() - t0)  # the wait for the one write lock (store.waits)

    return engine


def session_makers(engine: Engine) -> tuple[sessionmaker[Session], sessionmaker[Session]]:
    """(read, write) session factories; the write one marks its connections for BEGIN IMMEDIATE."""
    read = sessionmaker(bind=engine, expire_on_commit=False, autoflush=True)
    write = sessionmaker(
        bind=engine.execution_options(**{WRITE_OPTION: True}), expire_on_commit=False, autoflush=True
    )
    return read, write


# what a store call without an explicit time stores: the wall clock, or the control plane's clock
# (fairpod.server.runtime.steadyclock, set by the composition root with ``use_clock``), so that the times stored with jobs
# and the control plane's readings are on one timeline
_clock: list[Callable[[], float]] = [time.time]


def use_clock(clock: Callable[[], float]) -> None:
    _clock[0] = clock


def now() -> float:
    """The time a store call without an explicit one stores (see ``use_clock``)."""
    return _clock[0]()


class Ops:
    """Base of the operation mixins. ``_session(write)`` gives the session to work in: a fresh
    transaction per call on a ``Store``, the one open transaction on a ``Tx``."""

    def _session(self, write: bool) -> AbstractContextManager[Session]:
        raise NotImplementedError

    @staticmethod
    def _now(now: float | None) -> float:
        return _clock[0]() if now is None else float(now)


@contextmanager
def transaction(maker: sessionmaker[Session]) -> Iterator[Session]:
    """A session in one transaction: committed on normal exit, rolled back (nothing kept) on an exception."""
    with maker() as s, s.begin():
        yield s
