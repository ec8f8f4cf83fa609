"""The plain, immutable records the store returns (never live ORM objects) and its errors. The enums the
records carry live in ``fairpod.model`` (``nodes``, ``users``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fairpod.model.jobs import JobSpec, JobState
from fairpod.model.nodes import DeepHealthCheck, NodeHealth
from fairpod.model.spec import ClusterSpec
from fairpod.model.users import Role

# -- errors ------------------------------------------------------------------------------------------


class StoreError(Exception):
    """Base class of the store's own errors. The transaction that raised it has been rolled back."""


class Unreachable(StoreError):
    """The database did not answer (refused, unknown host, a role that may not log in): nothing was read or
    written. The message is one line and names the database without its password."""


class NotFound(StoreError, LookupError):
    """The row to update or read does not exist."""


class AlreadyExists(StoreError, ValueError):
    """A row with the same key (node name, user name, active job team+name …) exists already."""


class Conflict(StoreError):
    """An optimistic check failed: the spec version or the job state was not the expected one."""


# -- records -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpecRecord:
    spec: ClusterSpec
    version: int
    updated_at: float


@dataclass(frozen=True, slots=True)
class SpecVersion:
    """One entry of the spec history; ``spec`` is None in listings."""

    version: int
    applied_at: float
    actor: str
    action: str
    spec: ClusterSpec | None


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    instance_group: str
    instance_type: str
    health_status: NodeHealth = NodeHealth.SCHEDULABLE
    deep_health_check: DeepHealthCheck | None = None
    cordoned: bool = False
    fault_type: str | None = None
    fault_reason: str | None = None
    last_check_at: float | None = None
    labels: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0

    @property
    def schedulable(self) -> bool:
        return self.health_status == NodeHealth.SCHEDULABLE and not self.cordoned


@dataclass(frozen=True, slots=True)
class Job:
    """A stored job. ``acc``/``mcpu``/``mib`` are per replica; ``nodes`` is the replica count."""

    id: int
    name: str
    team: str
    spec: JobSpec
    state: JobState
    reason: str
    priority: int
    instance_type: str
    nodes: int
    acc: int
    mcpu: int
    mib: int
    submit_time: float
    seq: int
    enqueued_at: float | None
    started_at: float | None
    first_started_at: float | None
    finished_at: float | None
    attempt: int
    max_retry: int
    auto_resume: bool
    placement: list[str]
    borrowed_from: dict[str, Any]
    preemptions: int
    run_state: dict[str, Any] | None
    checkpoint_at: float | None
    checkpoint_step: int | None
    checkpoint_path: str | None
    master_port: int | None
    updated_at: float
    array_id: int | None = None  # a task of a job array: the array's id (its first task's id)
    array_limit: int | None = None  # the array's throttle (at most this many tasks at a time)
    incarnation: str | None = None  # random per job, its job tokens are signed over it (server.access.jobtoken)


@dataclass(frozen=True, slots=True)
class EngineJob:
    """An unfinished job as the control plane's memory needs it (the engine's workload, the live attempt, the
    holds of arrays and backoffs): its columns and the few fields of its spec the engine reads, read in one
    query when the memory is built (``store.unfinished``), without the job's whole spec. ``spec`` is the whole
    spec only where the engine's fields need more (a service: its kind; a job naming several instance types:
    its fallbacks; a row an older fairpod wrote without one of the fields), else None."""

    id: int
    name: str
    team: str
    state: JobState
    reason: str
    priority: int
    instance_type: str
    nodes: int
    acc: int
    mcpu: int
    mib: int
    submit_time: float
    seq: int
    enqueued_at: float | None
    started_at: float | None
    attempt: int
    placement: list[str]
    borrowed_from: dict[str, Any]
    preemptions: int
    run_state: dict[str, Any] | None
    checkpoint_at: float | None
    array_id: int | None
    array_limit: int | None
    # of the spec
    kind: str  # JobSpec.kind
    spec_nodes: int  # JobSpec.nodes (an elastic job's minimum; ``nodes`` above is its size now)
    max_nodes: int | None
    expected_duration_seconds: float | None
    min_runtime_seconds: float
    passed_only: bool  # JobSpec.deep_health_check_passed_nodes_only
    user: str | None
    required_topology: str | None
    preferred_topology: str | None
    spec: JobSpec | None = None

    @classmethod
    def of(cls, job: Job) -> EngineJob:
        """The same fields of a whole job record (what the memory is given after a transition)."""
        sp = job.spec
        return cls(
            job.id, job.name, job.team, job.state, job.reason, job.priority, job.instance_type, job.nodes, job.acc,
            job.mcpu, job.mib, job.submit_time, job.seq, job.enqueued_at, job.started_at, job.attempt,
            job.placement, job.borrowed_from, job.preemptions, job.run_state, job.checkpoint_at, job.array_id,
            job.array_limit, sp.kind, sp.nodes, sp.max_nodes, sp.expected_duration_seconds, sp.min_runtime_seconds,
            sp.deep_health_check_passed_nodes_only, sp.user, sp.required_topology, sp.preferred_topology, sp,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    ts: float
    kind: str
    job_id: int | None
    node: str | None
    team: str | None
    message: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class User:
    name: str
    role: Role
    teams: list[str]
    created_at: float


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A token's metadata. The plain token is shown once by ``issue_token`` and never stored."""

    id: int
    user: str
    created_at: float
    revoked_at: float | None
    last_used_at: float | None
    description: str


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    ts: float
    actor: str
    action: str
    target: str
    detail: dict[str, Any]
