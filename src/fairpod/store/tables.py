"""SQLAlchemy table definitions. Only the store's modules use these; callers get plain records.

The schema is changed only by a migration (``fairpod.store.migrations``), which the store runs at start-up.
Conventions: every time is a float of unix seconds; JSON columns are JSONB on PostgreSQL and JSON text on
SQLite; enum-like columns are short strings checked in Python (so a new enum value needs no migration).
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, Table, Text, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

ACTIVE = "state NOT IN ('Succeeded', 'Failed', 'Cancelled')"  # an unfinished job: the partial indexes' condition

# JobState values that count as finished (see fairpod.model.jobs.JobState.finished).
FINISHED_STATES = ("Succeeded", "Failed", "Cancelled")

Json = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: Json, list[str]: Json}


def table(row: type[Base]) -> Table:
    """A mapped class's table (SQLAlchemy's stubs type ``__table__`` as any ``FromClause``; a declarative
    class's is its ``Table``, which ``insert`` and ``update`` ask for)."""
    return cast(Table, row.__table__)


class ClusterRow(Base):
    """The one cluster row (id is always 1): the whole ClusterSpec as JSON and its version."""

    __tablename__ = "cluster"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    spec: Mapped[dict[str, Any]]
    version: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[float] = mapped_column(Float)


class SpecVersionRow(Base):
    """Every spec the cluster ever had (``fairpod policy history``): version, when, who, and the spec."""

    __tablename__ = "spec_history"
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    spec: Mapped[dict[str, Any]]
    applied_at: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64))


class MetaRow(Base):
    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class CounterRow(Base):
    """Named integer counters bumped atomically inside a write transaction (e.g. the job seq)."""

    __tablename__ = "counters"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(Integer)


class SubmitKeyRow(Base):
    """An ``Idempotency-Key`` a user submitted a job with: a retry with the same key gets that job back."""

    __tablename__ = "submit_keys"
    user: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    job_id: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float, index=True)


class NodeRow(Base):
    __tablename__ = "nodes"
    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    instance_group: Mapped[str] = mapped_column(String(64), index=True)
    instance_type: Mapped[str] = mapped_column(String(64), index=True)
    health_status: Mapped[str] = mapped_column(String(40))
    deep_health_check: Mapped[str | None] = mapped_column(String(20))
    cordoned: Mapped[bool] = mapped_column(Boolean)
    fault_type: Mapped[str | None] = mapped_column(String(128))
    fault_reason: Mapped[str | None] = mapped_column(Text)
    last_check_at: Mapped[float | None] = mapped_column(Float)
    labels: Mapped[dict[str, Any]]
    created_at: Mapped[float] = mapped_column(Float)


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        # A (team, name) pair is unique among unfinished jobs; finished jobs keep their name for history.
        Index(
            "ux_jobs_team_name_active",
            "team",
            "name",
            unique=True,
            sqlite_where=text(ACTIVE),
            postgresql_where=text(ACTIVE),
        ),
        Index("ix_jobs_team_name", "team", "name"),
        # the dashboard's counts of unfinished jobs per state and team, from the index alone (task_index)
        Index(
            "ix_jobs_unfinished_state_team",
            "state",
            "team",
            "preemptions",
            sqlite_where=text(ACTIVE),
            postgresql_where=text(ACTIVE),
        ),
        Index("ix_jobs_state_seq", "state", "seq"),
        Index("ix_jobs_finished_at", "finished_at"),
        Index("ix_jobs_first_started_at", "first_started_at"),  # /metrics: the jobs admitted since a scrape
        Index("ix_jobs_team_seq", "team", "seq"),  # a team's newest jobs
        Index("ix_jobs_array_id", "array_id"),  # the tasks of a job array
        {"sqlite_autoincrement": True},
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(63))
    team: Mapped[str] = mapped_column(String(40))
    spec: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str] = mapped_column(Text)
    priority: Mapped[int] = mapped_column(Integer)
    instance_type: Mapped[str] = mapped_column(String(64))
    nodes: Mapped[int] = mapped_column(Integer)
    acc: Mapped[int] = mapped_column(Integer)
    mcpu: Mapped[int] = mapped_column(Integer)
    mib: Mapped[int] = mapped_column(Integer)
    submit_time: Mapped[float] = mapped_column(Float)
    seq: Mapped[int] = mapped_column(Integer, unique=True)
    enqueued_at: Mapped[float | None] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    first_started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    attempt: Mapped[int] = mapped_column(Integer)
    max_retry: Mapped[int] = mapped_column(Integer)
    auto_resume: Mapped[bool] = mapped_column(Boolean)
    placement: Mapped[list[str]]
    borrowed_from: Mapped[dict[str, Any]]
    preemptions: Mapped[int] = mapped_column(Integer)
    run_state: Mapped[dict[str, Any] | None] = mapped_column(Json)  # fairpod.server.runs.Run, as JSON
    checkpoint_at: Mapped[float | None] = mapped_column(Float)
    checkpoint_step: Mapped[int | None] = mapped_column(Integer)
    checkpoint_path: Mapped[str | None] = mapped_column(Text)
    master_port: Mapped[int | None] = mapped_column(Integer)
    updated_at: Mapped[float] = mapped_column(Float)
    array_id: Mapped[int | None] = mapped_column(Integer)  # a job array's task: the array's id (its first task's)
    array_limit: Mapped[int | None] = mapped_column(Integer)  # ... and how many of its tasks may run at a time
    # random per job: its job tokens are signed over it, so none from a discarded timeline (a restore takes ids
    # back) is good for a later job of the same id (fairpod.server.access.jobtoken); None: stored before revision 0015
    incarnation: Mapped[str | None] = mapped_column(String(32))


class EventRow(Base):
    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_job", "job_id", "id"),
        Index("ix_events_team", "team", "id"),
        Index("ix_events_node", "node", "id"),
        Index("ix_events_ts", "ts"),
        {"sqlite_autoincrement": True},
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[int | None] = mapped_column(Integer, ForeignKey("jobs.id", ondelete="SET NULL"))
    node: Mapped[str | None] = mapped_column(String(253))
    team: Mapped[str | None] = mapped_column(String(40))
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any]]


class UserRow(Base):
    __tablename__ = "users"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))
    teams: Mapped[list[str]]
    created_at: Mapped[float] = mapped_column(Float)


class TokenRow(Base):
    __tablename__ = "tokens"
    __table_args__ = ({"sqlite_autoincrement": True},)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(64), ForeignKey("users.name", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)
    last_used_at: Mapped[float | None] = mapped_column(Float)
    description: Mapped[str] = mapped_column(Text)


class AuditRow(Base):
    __tablename__ = "audit"
    __table_args__ = (Index("ix_audit_actor", "actor", "id"), {"sqlite_autoincrement": True})
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(Text)
    detail: Mapped[dict[str, Any]]


class UsageSampleRow(Base):
    """One series' figures at one sample time (see ``fairpod.store.usage``). ``kind`` is ``group`` (one
    instance group: in use and capacity of accelerators, vCPU, memory) or ``team`` (one team on one instance
    type: accelerators in quota, in use, borrowed, lent). All rows of one sample share its ``ts``."""

    __tablename__ = "usage_samples"
    __table_args__ = (Index("ix_usage_kind_ts", "kind", "ts"), Index("ix_usage_ts", "ts"),
                      {"sqlite_autoincrement": True})
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(8))
    name: Mapped[str] = mapped_column(String(64))  # the instance group or the team
    instance_type: Mapped[str] = mapped_column(String(64))
    acc: Mapped[float] = mapped_column(Float)  # accelerators in use
    vcpu: Mapped[float] = mapped_column(Float)  # vCPU in use
    memory_gib: Mapped[float] = mapped_column(Float)  # memory in use
    cap_acc: Mapped[float] = mapped_column(Float)  # group: capacity; team: quota
    cap_vcpu: Mapped[float] = mapped_column(Float)
    cap_memory_gib: Mapped[float] = mapped_column(Float)
    borrowed: Mapped[float] = mapped_column(Float)  # team: accelerators above quota; group: 0
    lent: Mapped[float] = mapped_column(Float)  # team: own idle accelerators others use; group: 0
    nodes: Mapped[int] = mapped_column(Integer)  # group: nodes; team: 0
    healthy_nodes: Mapped[int] = mapped_column(Integer)  # group: schedulable nodes; team: 0


class UsageRollupRow(Base):
    """One series' figures summed over one time bucket of ``res`` seconds starting at ``t0`` (a multiple of
    ``res``): each figure is value x seconds, ``covered`` the seconds of the bucket that samples covered (the same
    for every series of the bucket). Written by ``fairpod.server.accounting.rollups`` from the samples; a row of kind
    ``mark`` per ``res`` holds in ``t0`` the time up to which that resolution is written."""

    __tablename__ = "usage_rollups"
    __table_args__ = (Index("ix_rollup_res_t0", "res", "t0"), {"sqlite_autoincrement": True})
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    res: Mapped[int] = mapped_column(Integer)
    t0: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(8))
    name: Mapped[str] = mapped_column(String(64))
    instance_type: Mapped[str] = mapped_column(String(64))
    covered: Mapped[float] = mapped_column(Float)
    acc: Mapped[float] = mapped_column(Float)
    vcpu: Mapped[float] = mapped_column(Float)
    memory_gib: Mapped[float] = mapped_column(Float)
    cap_acc: Mapped[float] = mapped_column(Float)
    cap_vcpu: Mapped[float] = mapped_column(Float)
    cap_memory_gib: Mapped[float] = mapped_column(Float)
    borrowed: Mapped[float] = mapped_column(Float)
    lent: Mapped[float] = mapped_column(Float)
    nodes: Mapped[float] = mapped_column(Float)
    healthy_nodes: Mapped[float] = mapped_column(Float)
