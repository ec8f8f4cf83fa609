"""A group of submits' rows in few statements (``transitions.submit.write_submits``, the core's and an API worker's
group commit): the jobs' rows built before the write transaction (:func:`submitted_row`: the spec's JSON, the
checked fields, the incarnation), then in it one counter bump for all their ``seq``s, one insert of the jobs, one
of their audit entries, one lookup and one insert of their Idempotency-Keys. A group of N submits took 6 N
statements before (a name check, a counter bump, the job, its event, its audit entry, each its own), all in
SQLite's one write lock (benchmarks/README.md, "The CPU of a worker's submit, second pass").
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, insert, select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from fairpod.model.jobs import JobSpec, JobState, ResolvedJob
from fairpod.store import fields as f
from fairpod.store.auth import AUDIT_LOCK_KEY
from fairpod.store.db import Ops
from fairpod.store.events import serialize_appends
from fairpod.store.jobs import _JOBS, FINISHED_STATES, JOB_FIELDS, JOB_SEQ_COUNTER, _next_seq, written_jobs
from fairpod.store.records import AlreadyExists, Job
from fairpod.store.tables import AuditRow, CounterRow, SubmitKeyRow, table

_COUNTERS = table(CounterRow)
_INSERT_JOB = insert(_JOBS)
# (id, seq): the ids matched to the rows by their seq (RETURNING's order is not the rows' on SQLite, and asking
# SQLAlchemy to sort them by the parameters' order makes it insert them one statement each there)
_INSERT_JOBS = insert(_JOBS).returning(_JOBS.c.id, _JOBS.c.seq)
_INSERT_AUDITS = insert(table(AuditRow))
_BUMP_SEQ_BY = (update(_COUNTERS).where(_COUNTERS.c.name == JOB_SEQ_COUNTER)
                .values(value=_COUNTERS.c.value + bindparam("n")).returning(_COUNTERS.c.value))  # fmt: skip
_KEYS = table(SubmitKeyRow)
_INSERT_KEYS = insert(_KEYS)
_AUDIT = {"actor": f.text, "action": f.text, "target": f.text, "detail": f.json_of(dict)}


def submitted_row(spec: JobSpec, resolved: ResolvedJob, reason: str) -> dict[str, Any]:
    """A new pending job's row as ``insert_job`` stores it, but for its times and ``seq`` (set in the write
    transaction by :meth:`SubmitOps.insert_submitted`): what can be built before the transaction, outside its lock."""
    vals = f.check("job", JOB_FIELDS, {"state": JobState.PENDING, "reason": reason})
    acc, mcpu, mib = resolved.per_replica
    return dict(
        name=spec.name, team=spec.team, spec=spec.model_dump(mode="json"), state=vals["state"], reason=vals["reason"],
        priority=resolved.priority, instance_type=resolved.instance_type, nodes=spec.nodes, acc=acc, mcpu=mcpu,
        mib=mib, submit_time=None, seq=None, enqueued_at=None, started_at=None, first_started_at=None,
        finished_at=None, attempt=0, max_retry=spec.max_retry, auto_resume=spec.auto_resume, placement=[],
        borrowed_from={}, preemptions=0, run_state=None, checkpoint_at=None, checkpoint_step=None,
        checkpoint_path=None, master_port=None, updated_at=None, array_id=None, array_limit=None,
        incarnation=secrets.token_hex(16),
    )  # fmt: skip


class SubmitOps(Ops):
    def insert_submitted(self, rows: Sequence[dict[str, Any]], specs: Sequence[JobSpec], *,
                         now: float | None = None) -> list[Job]:
        """Store new pending jobs (``rows`` of :func:`submitted_row`, ``specs`` their specs) with consecutive
        ``seq``s in arrival order, as ``insert_job`` stores each: one counter bump, one insert. The rows get their
        times and ``seq`` here. Raises ``AlreadyExists`` (nothing stored) if a team has an unfinished job of one
        of those names, or two of them share a name: the unique index's verdict, not a read before each insert."""
        if not rows:
            return []
        ts = self._now(now)
        with self._session(True) as s:
            return _write(s, rows, specs, ts)

    def insert_tasks(self, specs: list[JobSpec], resolved: ResolvedJob, reasons: list[str], array_id: int,
                     array_limit: int | None, *, now: float | None = None) -> list[Job]:
        """Store more tasks of the job array ``array_id`` (same team and shape; ``reasons`` one each) as
        :meth:`insert_submitted` stores a group: thousands of tasks in one request (``benchmarks/datacenter.py``).
        Raises ``AlreadyExists``, naming one, if the team has an unfinished job of one of those names."""
        if not specs:
            return []
        team = specs[0].team
        rows = [submitted_row(sp, resolved, reason) | {"array_id": array_id, "array_limit": array_limit}
                for sp, reason in zip(specs, reasons, strict=True)]
        with self._session(True) as s:
            conn = s.connection()
            names = [sp.name for sp in specs]
            for i in range(0, len(names), 500):  # the name taken, for the answer (the unique index decides too)
                hit = conn.execute(select(_JOBS.c.name).where(
                    _JOBS.c.team == team, _JOBS.c.name.in_(names[i:i + 500]),
                    _JOBS.c.state.not_in(FINISHED_STATES)).limit(1)).first()
                if hit is not None:
                    raise AlreadyExists(f"team {team!r} already has an unfinished job named {hit[0]!r}")
            return _write(s, rows, specs, self._now(now))

    def submitted_with(self, user: str, key: str) -> int | None:
        """The id of the job ``user`` submitted with Idempotency-Key ``key``, if any."""
        return self.submitted_with_keys([(user, key)]).get((user, key))

    def remember_submit(self, user: str, key: str, job_id: int) -> None:
        """Record ``key`` for ``job_id`` (in the transaction that inserts the job)."""
        self.remember_submits([(user, key, job_id)])

    def submitted_with_keys(self, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """``submitted_with`` for many (user, Idempotency-Key) pairs in one statement: the job id of each pair
        that was used."""
        if not pairs:
            return {}
        wanted, out = list(dict.fromkeys(pairs)), dict[tuple[str, str], int]()
        with self._session(False) as s:
            for i in range(0, len(wanted), 500):  # a statement's bound parameters are limited
                found = s.connection().execute(select(_KEYS.c.user, _KEYS.c.key, _KEYS.c.job_id).where(
                    tuple_(_KEYS.c.user, _KEYS.c.key).in_(wanted[i:i + 500])))
                out.update({(str(r.user), str(r.key)): int(r.job_id) for r in found})
        return out

    def remember_submits(self, keys: Sequence[tuple[str, str, int]], *, now: float | None = None) -> None:
        """``remember_submit`` for many (user, key, job id) in one statement (in the transaction that inserts
        the jobs)."""
        if not keys:
            return
        ts = self._now(now)
        with self._session(True) as s:
            s.connection().execute(_INSERT_KEYS, [{"user": u, "key": k, "job_id": j, "created_at": ts}
                                                  for u, k, j in keys])

    def append_audits(self, entries: Sequence[Mapping[str, Any]], *, ts: float | None = None) -> None:
        """``append_audit`` for many entries (``actor``, ``action``, ``target``, ``detail``) in one statement,
        ids in the given order."""
        if not entries:
            return
        rows = []
        for e in entries:
            vals = f.check("audit", _AUDIT, {"target": "", **e, "detail": dict(e.get("detail") or {})})
            vals["ts"] = self._now(ts)
            rows.append(vals)
        with self._session(True) as s:
            serialize_appends(s, AUDIT_LOCK_KEY)
            s.connection().execute(_INSERT_AUDITS, rows)


def _write(s: Session, rows: Sequence[dict[str, Any]], specs: Sequence[JobSpec], ts: float) -> list[Job]:
    """The jobs' rows of :meth:`SubmitOps.insert_submitted` in session ``s``: one counter bump, one insert."""
    one = len(rows) == 1
    taken = (f"team {rows[0]['team']!r} already has an unfinished job named {rows[0]['name']!r}" if one
             else "a team already has an unfinished job of one of these names")
    conn = s.connection()
    last = conn.execute(_BUMP_SEQ_BY, {"n": len(rows)}).scalar()
    if last is not None:
        first = int(last) - len(rows) + 1
    else:  # no counter row yet (a store an older fairpod made): made as insert_job makes it
        first = _next_seq(s, conn)
        if len(rows) > 1:
            conn.execute(_BUMP_SEQ_BY, {"n": len(rows) - 1})
    for k, row in enumerate(rows):
        row.update(submit_time=ts, enqueued_at=ts, updated_at=ts, seq=first + k)
    try:
        if one:
            ids: Sequence[int] = [conn.execute(_INSERT_JOB, rows[0]).inserted_primary_key[0]]  # type: ignore[index]  # a one-row insert has its key
        else:
            by_seq = {int(r.seq): int(r.id) for r in conn.execute(_INSERT_JOBS, list(rows))}
            ids = [by_seq[row["seq"]] for row in rows]
    except IntegrityError as e:
        raise AlreadyExists(taken) from e
    return written_jobs(ids, specs, rows, ts)


__all__ = ["SubmitOps", "submitted_row"]
