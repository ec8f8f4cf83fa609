"""``Store``: the control plane's persistence. Every method runs in its own transaction; ``Store.tx()``
gives a ``Tx`` with the same methods that all run in one transaction (committed at the end of the
``with`` block, rolled back entirely if it raises)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import TracebackType

from sqlalchemy import Engine, func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from fairpod.store.auth import AuthOps
from fairpod.store.cluster import ClusterOps
from fairpod.store.db import make_engine, session_makers, transaction
from fairpod.store.events import EventOps
from fairpod.store.jobs import JOB_SEQ_COUNTER, JobOps
from fairpod.store.lookups import JobLookupOps
from fairpod.store.nodes import NodeOps
from fairpod.store.records import StoreError, Unreachable
from fairpod.store.retention import RetentionOps
from fairpod.store.rollups import RollupOps
from fairpod.store.schema import migrate
from fairpod.store.submitted import SubmitOps
from fairpod.store.tables import CounterRow, JobRow
from fairpod.store.unfinished import UnfinishedOps
from fairpod.store.usage import UsageOps
from fairpod.store.writers import WritersTurn


class _AllOps(ClusterOps, NodeOps, JobOps, SubmitOps, UnfinishedOps, JobLookupOps, EventOps, AuthOps, UsageOps,
              RollupOps, RetentionOps):
    pass


class Tx(_AllOps):
    """The store's operations inside one open transaction. Use it only in the thread and the ``with``
    block that made it. A write ``Tx`` (the default) on SQLite holds the database's write lock until it
    ends: keep it short, and inside the block call ``t.…``, not ``store.…`` (a write through the store
    would wait for the lock this transaction holds, up to the busy timeout)."""

    def __init__(self, session: Session, write: bool):
        self._s = session
        self._write = write
        self._open = True

    @contextmanager
    def _session(self, write: bool) -> Iterator[Session]:
        if not self._open:
            raise StoreError("this transaction has ended")
        if write and not self._write:
            raise StoreError("cannot write in a read-only transaction (store.tx(write=False))")
        yield self._s


class Store(_AllOps):
    """Persistence for the control plane. Thread-safe: one Engine, a session per call.

    ``url``: ``sqlite:////abs/path/fairpod.db`` (the default kind; ``sqlite://`` is an in-memory DB on
    one shared connection, for single-threaded tests only) or ``postgresql+psycopg://user:pw@host/db``. ``synchronous`` and ``busy_timeout_ms`` apply
    to SQLite only.
    """

    def __init__(
        self, url: str, *, synchronous: str = "FULL", busy_timeout_ms: int = 30_000, echo: bool = False
    ):
        self.url = url
        self.engine: Engine = make_engine(
            url, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms, echo=echo
        )
        self._read, self._write = session_makers(self.engine)
        # run at the start of every write transaction; raises to refuse it (a standby's lease: store.lease)
        self.fence: Callable[[Session], None] | None = None
        # SQLite shared by processes of one home (the core, its API workers): each write transaction waits its turn
        # here first, not in SQLite's busy handler (store.writers; set by the composition root)
        self.turn: WritersTurn | None = None

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    def _session(self, write: bool) -> AbstractContextManager[Session]:
        return self._fenced() if write else transaction(self._read)

    @contextmanager
    def _fenced(self) -> Iterator[Session]:
        with self.turn.held() if self.turn is not None else nullcontext(), transaction(self._write) as s:
            if self.fence is not None:
                self.fence(s)
            yield s

    @contextmanager
    def tx(self, *, write: bool = True) -> Iterator[Tx]:
        """``with store.tx() as t: t.update_job(…); t.append_event(…)`` — all or nothing."""
        with self._fenced() if write else transaction(self._read) as s:
            t = Tx(s, write)
            try:
                yield t
            finally:
                t._open = False

    def create_all(self) -> None:
        """Create or migrate the schema to this fairpod's (``fairpod.store.schema.migrate``). Safe to call
        every start.

        Raises ``StoreError`` if the database was written by a newer fairpod (a schema revision unknown here),
        ``Unreachable`` if it cannot be reached.
        """
        try:
            with self.engine.connect():
                pass
        except OperationalError as e:
            where = self.engine.url.render_as_string(hide_password=True)
            lines = str(e.orig or e).strip().splitlines()
            raise Unreachable(f"cannot reach the database {where}: {lines[0] if lines else type(e).__name__}") from None
        migrate(self.engine)
        with transaction(self._write) as s:
            if s.get(CounterRow, JOB_SEQ_COUNTER) is None:
                top = s.scalar(select(func.max(JobRow.seq))) or 0
                s.add(CounterRow(name=JOB_SEQ_COUNTER, value=top))

    def ping(self) -> None:
        """One round trip to the database (``SELECT 1``); raises what the driver raises when it cannot be reached."""
        with self.engine.connect() as c:
            c.execute(select(1))

    def close(self) -> None:
        """Close pooled connections (on SQLite this also checkpoints the WAL when the last one closes)."""
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.engine.url.render_as_string(hide_password=True)!r})"
