"""Jobs: the submitted JobSpec plus everything the control plane tracks while the job lives.

Names: a (team, name) pair is unique among *unfinished* jobs (a partial unique index); once a job is
Succeeded, Failed or Cancelled its name may be submitted again. ``get_job_by_name`` (store.lookups) returns the
unfinished job of that name if there is one, else the most recently submitted one.

``seq`` is the global submission order, taken from a counter in the same transaction as the insert.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Text, bindparam, cast, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from fairpod.model.jobs import JobSpec, JobState, ResolvedJob
from fairpod.model.logrules import STORED, LogRule
from fairpod.model.services import ServiceSpec
from fairpod.store import fields as f
from fairpod.store.cluster import next_counter
from fairpod.store.db import Ops
from fairpod.store.records import AlreadyExists, Conflict, Job, NotFound
from fairpod.store.tables import FINISHED_STATES, CounterRow, JobRow, table

JOB_SEQ_COUNTER = "job_seq"


def _spec(v: Any) -> dict[str, Any]:
    if isinstance(v, JobSpec):
        return v.model_dump(mode="json")
    return JobSpec.model_validate(v).model_dump(mode="json")


# The fields ``update_job`` may set. id, name and team never change.
JOB_FIELDS: dict[str, f.Conv] = {
    "spec": _spec,
    "state": f.enum(JobState),
    "reason": f.text,
    "priority": f.integer,
    "instance_type": f.text,
    "nodes": f.integer,
    "acc": f.integer,
    "mcpu": f.integer,
    "mib": f.integer,
    "submit_time": f.number,
    "seq": f.integer,
    "enqueued_at": f.optional(f.number),
    "started_at": f.optional(f.number),
    "first_started_at": f.optional(f.number),
    "finished_at": f.optional(f.number),
    "attempt": f.integer,
    "max_retry": f.integer,
    "auto_resume": f.boolean,
    "placement": f.str_list,
    "borrowed_from": f.json_of(dict),
    "preemptions": f.integer,
    "run_state": f.optional(f.json_of(dict)),
    "checkpoint_at": f.optional(f.number),
    "checkpoint_step": f.optional(f.integer),
    "checkpoint_path": f.optional(f.text),
    "master_port": f.optional(f.integer),
    "array_id": f.optional(f.integer),
    "array_limit": f.optional(f.integer),
}


# job id -> (updated_at of the row version read last, its validated spec): one entry per job, replaced when the row
# changes. Keyed by (id, updated_at) before, every version of a job (submitted, admitted, started, finished: each
# write bumps updated_at) kept an entry until 20,000 of them cleared the lot: the control plane's memory grew by
# ~40 MiB of dead versions under a steady load before it levelled (benchmarks/memory_soak.py)
_SPECS: dict[int, tuple[float, JobSpec]] = {}
_SPECS_MAX = 20_000


_SPEC_FIELDS = tuple(JobSpec.model_fields)
STORED_CONTEXT = {STORED: True}  # a log rule's pattern was checked when the job was submitted (model.logrules)
_SPEC_KEYS = frozenset(_SPEC_FIELDS)


def stored_spec(data: dict[str, Any]) -> JobSpec:
    """A JobSpec built from what the store holds, without validating it again: every writer of the ``spec``
    column stores ``model_dump(mode="json")`` of a validated spec (``insert_job``, ``SubmitOps.insert_tasks``,
    ``update_job``'s ``_spec``), so when the row has every field (what this fairpod writes) the object is
    built from them as they are, as pydantic's ``model_construct`` builds one, and only the nested models
    (``service``, ``log_rules``) are validated, when a job has them. A row an older fairpod wrote (a field
    missing) is validated, as before. Validating each of 100,000 waiting jobs' specs again was most of a
    restart (``benchmarks/recovery.py``)."""
    if not data.keys() >= _SPEC_KEYS:
        return JobSpec.model_validate(data, context=STORED_CONTEXT)
    d = {k: data[k] for k in _SPEC_FIELDS}
    if d["service"] is not None:
        d["service"] = ServiceSpec.model_validate(d["service"])
    if d["log_rules"]:
        d["log_rules"] = [LogRule.model_validate(x, context=STORED_CONTEXT) for x in d["log_rules"]]
    spec = JobSpec.__new__(JobSpec)
    object.__setattr__(spec, "__dict__", d)
    object.__setattr__(spec, "__pydantic_fields_set__", set(_SPEC_FIELDS))
    object.__setattr__(spec, "__pydantic_extra__", None)
    object.__setattr__(spec, "__pydantic_private__", None)
    return spec


def _spec_of(r: Any) -> JobSpec:
    """The row's JobSpec (``stored_spec``), built once per row version (reads of long job lists are the API's
    hot path). A spec's update bumps ``updated_at``, so a cached spec is never stale; callers never mutate a
    Job's spec."""
    hit = _SPECS.get(r.id)
    if hit is not None and hit[0] == r.updated_at:
        return hit[1]
    data = r.spec  # the column as text where read through _ROWS (decoded only here, on a miss), else a dict
    spec = stored_spec(json.loads(data) if isinstance(data, str) else data)
    if hit is None and len(_SPECS) >= _SPECS_MAX:
        _SPECS.clear()
    _SPECS[r.id] = (r.updated_at, spec)
    return spec


def to_job(r: JobRow | SimpleNamespace) -> Job:
    """A job from its row, or from the columns just inserted (a namespace of the row's fields)."""
    return Job(
        id=r.id,
        name=r.name,
        team=r.team,
        spec=_spec_of(r),
        state=JobState(r.state),
        reason=r.reason,
        priority=r.priority,
        instance_type=r.instance_type,
        nodes=r.nodes,
        acc=r.acc,
        mcpu=r.mcpu,
        mib=r.mib,
        submit_time=r.submit_time,
        seq=r.seq,
        enqueued_at=r.enqueued_at,
        started_at=r.started_at,
        first_started_at=r.first_started_at,
        finished_at=r.finished_at,
        attempt=r.attempt,
        max_retry=r.max_retry,
        auto_resume=bool(r.auto_resume),
        placement=list(r.placement or []),
        borrowed_from=dict(r.borrowed_from or {}),
        preemptions=r.preemptions,
        run_state=None if r.run_state is None else dict(r.run_state),
        checkpoint_at=r.checkpoint_at,
        checkpoint_step=r.checkpoint_step,
        checkpoint_path=r.checkpoint_path,
        master_port=r.master_port,
        updated_at=r.updated_at,
        array_id=r.array_id,
        array_limit=r.array_limit,
        incarnation=r.incarnation,
    )


def written_jobs(ids: Sequence[int], specs: Sequence[JobSpec], rows: Sequence[Mapping[str, Any]],
                 ts: float) -> list[Job]:
    """The records of jobs just inserted (``rows`` with their new ``ids``); each spec, just validated, kept so
    that it is not built again from its JSON."""
    out = []
    for jid, spec, row in zip(ids, specs, rows, strict=True):
        if len(_SPECS) < _SPECS_MAX:
            _SPECS[jid] = (ts, spec)
        out.append(to_job(SimpleNamespace(id=jid, **row)))
    return out


def _states(v: JobState | str | Iterable[JobState | str]) -> list[str]:
    items = [v] if isinstance(v, str) else list(v)
    return [str(JobState(x)) for x in items]


def _names(v: str | Iterable[str]) -> list[str]:
    return [v] if isinstance(v, str) else list(v)


def _filtered(q: Any, team: str | Iterable[str] | None, state: JobState | str | Iterable[JobState | str] | None,
              instance_type: str | None, name: str | None, finished: bool | None) -> Any:
    if team is not None:
        q = q.where(JobRow.team.in_(_names(team)))
    if state is not None:
        q = q.where(JobRow.state.in_(_states(state)))
    if instance_type is not None:
        q = q.where(JobRow.instance_type == instance_type)
    if name is not None:
        q = q.where(JobRow.name == name)
    if finished is not None:
        cond = JobRow.state.in_(FINISHED_STATES)
        q = q.where(cond if finished else ~cond)
    return q


_JOBS = table(JobRow)
_COUNTERS = table(CounterRow)
# the jobs' columns with the spec as its text (decoded by _spec_of only when its cached spec is not that row's):
# a page of 100 jobs decoded every spec's JSON before the cache was asked, ~30 % of a list's read in an API worker
# (benchmarks/README.md, "A list page's specs from the cache")
_ROWS = [cast(c, Text).label(c.name) if c.name == "spec" else c for c in _JOBS.c]
_INSERT_JOB = insert(_JOBS)
_ACTIVE_NAMED = (select(_JOBS.c.id).where(_JOBS.c.team == bindparam("t"), _JOBS.c.name == bindparam("n"),
                                           _JOBS.c.state.not_in(FINISHED_STATES)).limit(1))  # fmt: skip
_BUMP_SEQ = (update(_COUNTERS).where(_COUNTERS.c.name == JOB_SEQ_COUNTER)
             .values(value=_COUNTERS.c.value + 1).returning(_COUNTERS.c.value))  # fmt: skip
_BUMP_SEQ_BY = update(_COUNTERS).where(_COUNTERS.c.name == JOB_SEQ_COUNTER).values(value=_COUNTERS.c.value + bindparam("n"))
_UPDATES: dict[tuple[str, ...], Any] = {}  # update_jobs' statement per set of columns


def _next_seq(s: Session, conn: Connection) -> int:
    """The next job ``seq``: the counter bumped in the caller's write transaction (as ``next_counter``)."""
    value = conn.execute(_BUMP_SEQ).scalar()
    return int(value) if value is not None else next_counter(s, JOB_SEQ_COUNTER)


def _flush(s: Session, team: str, name: str) -> None:
    try:
        s.flush()
    except IntegrityError as e:
        raise AlreadyExists(f"team {team!r} already has an unfinished job named {name!r}") from e


class JobOps(Ops):
    def insert_job(
        self,
        spec: JobSpec,
        resolved: ResolvedJob,
        *,
        state: JobState = JobState.PENDING,
        reason: str = "",
        submit_time: float | None = None,
        now: float | None = None,
        array_id: int | None = None,
        array_limit: int | None = None,
    ) -> Job:
        """Store a new job (``resolved`` from ``fairpod.model.jobs.resolve_job``) with the next ``seq``
        (``array_id``, ``array_limit``: a task of a job array whose id is known already).

        Raises ``AlreadyExists`` if the team has an unfinished job of that name.
        """
        if not isinstance(spec, JobSpec) or not isinstance(resolved, ResolvedJob):
            raise TypeError("insert_job wants a JobSpec and its ResolvedJob")
        ts = self._now(now)
        submit = ts if submit_time is None else float(submit_time)
        acc, mcpu, mib = resolved.per_replica
        st = JobState(state)
        vals = f.check("job", JOB_FIELDS, {"state": st, "reason": reason})
        taken = f"team {spec.team!r} already has an unfinished job named {spec.name!r}"
        # prepared Core statements, not the ORM: a submit is on the API's hot path (benchmarks/README.md)
        with self._session(True) as s:
            conn = s.connection()
            if not st.finished and conn.execute(_ACTIVE_NAMED, {"t": spec.team, "n": spec.name}).first():
                raise AlreadyExists(taken)
            row = dict(
                name=spec.name, team=spec.team, spec=spec.model_dump(mode="json"),
                state=vals["state"], reason=vals["reason"], priority=resolved.priority,
                instance_type=resolved.instance_type, nodes=spec.nodes, acc=acc, mcpu=mcpu, mib=mib,
                submit_time=submit, seq=_next_seq(s, conn), enqueued_at=submit,
                started_at=None, first_started_at=None, finished_at=ts if st.finished else None,
                attempt=0, max_retry=spec.max_retry, auto_resume=spec.auto_resume, placement=[],
                borrowed_from={}, preemptions=0, run_state=None, checkpoint_at=None, checkpoint_step=None,
                checkpoint_path=None, master_port=None, updated_at=ts, array_id=array_id, array_limit=array_limit,
                incarnation=secrets.token_hex(16),
            )  # fmt: skip
            try:
                res = conn.execute(_INSERT_JOB, row)
            except IntegrityError as e:
                raise AlreadyExists(taken) from e
            return to_job(SimpleNamespace(id=res.inserted_primary_key[0], **row))  # type: ignore[index]  # a one-row insert has its key

    def get_job(self, job_id: int) -> Job | None:
        with self._session(False) as s:
            row = s.get(JobRow, job_id)
            return None if row is None else to_job(row)

    def get_jobs(self, job_ids: Iterable[int]) -> dict[int, Job]:
        """The jobs of these ids that exist, by id, read in one query."""
        ids = sorted(set(job_ids))
        out: dict[int, Job] = {}
        with self._session(False) as s:
            for i in range(0, len(ids), 500):
                for r in s.connection().execute(select(*_ROWS).where(_JOBS.c.id.in_(ids[i : i + 500]))):
                    out[r.id] = to_job(r)  # type: ignore[arg-type]  # a Core row has the same attributes
        return out

    def list_jobs(
        self,
        *,
        team: str | Iterable[str] | None = None,
        state: JobState | str | Iterable[JobState | str] | None = None,
        instance_type: str | None = None,
        name: str | None = None,
        finished: bool | None = None,
        limit: int | None = None,
        offset: int = 0,
        descending: bool = False,
    ) -> list[Job]:
        """Jobs matching every given filter, in submission order (``seq``; newest first if ``descending``)."""
        q = _filtered(select(*_ROWS), team, state, instance_type, name, finished)  # Core rows: no ORM objects
        q = q.order_by(JobRow.seq.desc() if descending else JobRow.seq)
        if offset:
            q = q.offset(offset)
        if limit is not None:
            q = q.limit(limit)
        with self._session(False) as s:
            return [to_job(r) for r in s.connection().execute(q)]  # type: ignore[arg-type]

    def count_jobs(
        self,
        *,
        team: str | Iterable[str] | None = None,
        state: JobState | str | Iterable[JobState | str] | None = None,
        instance_type: str | None = None,
        name: str | None = None,
        finished: bool | None = None,
    ) -> int:
        """How many jobs :meth:`list_jobs` would return with the same filters and no limit."""
        q = _filtered(select(func.count()).select_from(JobRow), team, state, instance_type, name, finished)
        with self._session(False) as s:
            return int(s.scalar(q) or 0)

    def update_job(
        self,
        job_id: int,
        changes: Mapping[str, Any],
        *,
        expect_state: JobState | str | Iterable[JobState | str] | None = None,
        now: float | None = None,
    ) -> Job:
        """Set the given fields (any of ``JOB_FIELDS``) and ``updated_at``; return the new row.

        Raises ``NotFound``; ``Conflict`` if ``expect_state`` is given and the job is in another state;
        ValueError for an unknown field or a bad value; ``AlreadyExists`` if the change would make two
        unfinished jobs of one team share a name. On any error nothing is changed.
        """
        vals = f.check("job", JOB_FIELDS, changes)
        with self._session(True) as s:
            row = s.get(JobRow, job_id, with_for_update=True)
            if row is None:
                raise NotFound(f"job {job_id} does not exist")
            if expect_state is not None and row.state not in _states(expect_state):
                raise Conflict(f"job {job_id} is {row.state}, not {', '.join(_states(expect_state))}")
            if "spec" in vals and (vals["spec"]["name"], vals["spec"]["team"]) != (row.name, row.team):
                raise ValueError("job.spec: the name and team of a job cannot change")
            for k, v in vals.items():
                setattr(row, k, v)
            row.updated_at = self._now(now)
            _flush(s, row.team, row.name)
            return to_job(row)

    def update_jobs(self, updates: Mapping[int, Mapping[str, Any]], *, now: float | None = None) -> None:
        """``update_job`` for many jobs at once, in one transaction and one statement per set of fields
        (the control plane's batched writes). The values are checked as by ``update_job``; raises
        ``NotFound`` if a job does not exist and ``AlreadyExists`` on a name clash (nothing is changed then).
        """
        if not updates:
            return
        ts = self._now(now)
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for job_id, changes in updates.items():
            vals = f.check("job", JOB_FIELDS, changes)
            if "spec" in vals:
                raise ValueError("job.spec: update_jobs does not change specs; use update_job")
            vals["updated_at"] = ts
            groups.setdefault(tuple(sorted(vals)), []).append({"_id": job_id, **vals})
        with self._session(True) as s:
            conn = s.connection()
            for cols, rows in groups.items():
                stmt = _UPDATES.get(cols)
                if stmt is None:
                    stmt = _UPDATES[cols] = (update(_JOBS).where(_JOBS.c.id == bindparam("_id"))
                                             .values({c: bindparam(c) for c in cols}))  # fmt: skip
                try:
                    res = conn.execute(stmt, rows)
                except IntegrityError as e:
                    raise AlreadyExists(f"a job update would give a team two unfinished jobs of one name: {e}") from e
                if res.rowcount != len(rows):
                    have = set(s.scalars(select(JobRow.id).where(JobRow.id.in_([r["_id"] for r in rows]))))
                    missing = sorted({r["_id"] for r in rows} - have)
                    if missing:
                        raise NotFound(f"job {missing[0]} does not exist")

    def count_jobs_by_state(self, *, team: str | Iterable[str] | None = None) -> dict[JobState, int]:
        """Number of jobs in each state (every state present, 0 if none)."""
        q = select(JobRow.state, func.count()).group_by(JobRow.state)
        if team is not None:
            q = q.where(JobRow.team.in_(_names(team)))
        out = dict.fromkeys(JobState, 0)
        with self._session(False) as s:
            for st, n in s.execute(q):
                out[JobState(st)] = n
        return out
