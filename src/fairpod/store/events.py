"""Events: an append-only log that the server streams with ``list_events(since_id=…)``.

Ids grow in commit order, so a reader that remembers the last id it saw never misses an event: SQLite
commits one writer at a time; on PostgreSQL appenders take a transaction-scoped advisory lock.
Ids are never reused (AUTOINCREMENT on SQLite, a sequence on PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import func, insert, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from fairpod.store import fields as f
from fairpod.store.db import Ops
from fairpod.store.records import Event, NotFound
from fairpod.store.tables import EventRow, JobRow, table

EVENT_LOCK_KEY = 0x66_70_65_76  # "fpev"
_INSERT_EVENT = insert(table(EventRow))


def serialize_appends(s: Session, key: int) -> None:
    """On PostgreSQL, make appenders of one log commit in id order (no-op on SQLite)."""
    if s.get_bind().dialect.name == "postgresql":
        s.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})


def to_event(r: EventRow) -> Event:
    return Event(r.id, r.ts, r.kind, r.job_id, r.node, r.team, r.message, dict(r.data or {}))


class EventOps(Ops):
    def append_event(
        self,
        kind: str,
        message: str = "",
        *,
        job_id: int | None = None,
        node: str | None = None,
        team: str | None = None,
        data: Mapping[str, Any] | None = None,
        ts: float | None = None,
    ) -> Event:
        """Append one event (e.g. kind JobSubmitted, JobAdmitted, JobPreempted, NodeFault).

        ``job_id``, if given, must name an existing job (else ``NotFound``).
        """
        vals = f.check(
            "event",
            {"kind": f.text, "message": f.text, "job_id": f.optional(f.integer), "node": f.optional(f.text),
             "team": f.optional(f.text), "data": f.json_of(dict)},
            {"kind": kind, "message": message, "job_id": job_id, "node": node, "team": team,
             "data": dict(data or {})},
        )  # fmt: skip
        if not kind:
            raise ValueError("event.kind: must not be empty")
        with self._session(True) as s:
            if job_id is not None and s.get(JobRow, job_id) is None:
                raise NotFound(f"job {job_id} does not exist")
            serialize_appends(s, EVENT_LOCK_KEY)
            row = EventRow(ts=self._now(ts), **vals)
            s.add(row)
            s.flush()
            return to_event(row)

    def append_events(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Append many events in one transaction and statement, in the given order (ids grow the same way).
        Each is a mapping of ``append_event``'s keyword arguments (``kind`` and ``message`` at least); the
        values are checked the same way. Raises ``NotFound`` (nothing appended) if a ``job_id`` is unknown.
        """
        convs = {"kind": f.text, "message": f.text, "job_id": f.optional(f.integer), "node": f.optional(f.text),
                 "team": f.optional(f.text), "data": f.json_of(dict), "ts": f.number}
        rows = []
        for ev in events:
            vals = f.check("event", convs, {"message": "", "job_id": None, "node": None, "team": None,
                                            "data": {}, **ev, "ts": self._now(ev.get("ts"))})
            if not vals["kind"]:
                raise ValueError("event.kind: must not be empty")
            rows.append(vals)
        if not rows:
            return
        with self._session(True) as s:
            serialize_appends(s, EVENT_LOCK_KEY)
            try:
                s.connection().execute(_INSERT_EVENT, rows)
            except IntegrityError as e:  # the only constraint: job_id must name a job
                raise NotFound(f"an event names a job that does not exist: {e.orig}") from e

    def list_events(
        self,
        *,
        job_id: int | None = None,
        team: str | None = None,
        node: str | None = None,
        kind: str | Iterable[str] | None = None,
        since_id: int | None = None,
        limit: int | None = 1000,
        descending: bool = False,
        ts_from: float | None = None,
        ts_to: float | None = None,
    ) -> list[Event]:
        """Events matching every filter with id > ``since_id`` (and ``ts_from <= ts < ts_to`` where given), oldest
        first (newest first if ``descending``).

        For a live feed: ``list_events(since_id=last_seen)`` in a loop.
        """
        q = select(EventRow)
        if job_id is not None:
            q = q.where(EventRow.job_id == job_id)
        if team is not None:
            q = q.where(EventRow.team == team)
        if node is not None:
            q = q.where(EventRow.node == node)
        if kind is not None:
            q = q.where(EventRow.kind.in_([kind] if isinstance(kind, str) else list(kind)))
        if since_id is not None:
            q = q.where(EventRow.id > since_id)
        if ts_from is not None:
            q = q.where(EventRow.ts >= ts_from)
        if ts_to is not None:
            q = q.where(EventRow.ts < ts_to)
        q = q.order_by(EventRow.id.desc() if descending else EventRow.id)
        if limit is not None:
            q = q.limit(limit)
        with self._session(False) as s:
            return [to_event(r) for r in s.scalars(q)]

    def last_event_id(self) -> int:
        """The id of the newest event, 0 if none: where a new live feed starts."""
        with self._session(False) as s:
            return s.scalar(select(func.max(EventRow.id))) or 0
