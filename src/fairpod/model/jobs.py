"""Jobs: what a user submits (JobSpec), the states a job goes through, and the events it leaves."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from fairpod.model.catalog import InstanceType
from fairpod.model.resources import Res, by_ratio, node_res
from fairpod.model.spec import NAME_PATTERN, ClusterSpec


class JobState(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    PREEMPTED = "Preempted"  # stopping after a preemption; becomes Pending again
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class JobSpec(BaseModel):
    """A job as submitted: ``nodes`` replicas of one instance type, each on its own node."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, max_length=63)
    team: str = Field(pattern=NAME_PATTERN, max_length=40)
    priority: str | None = None
    instance_type: str | None = None
    nodes: int = Field(default=1, ge=1, le=10_000)
    accelerators: float | None = Field(default=None, ge=0, description="per node; default the whole node")
    vcpu: float | None = Field(default=None, gt=0, description="per node; default by ratio")
    memory_gib: float | None = Field(default=None, gt=0, description="per node; default by ratio")
    command: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    auto_resume: bool = False
    max_retry: int = Field(default=0, ge=0, le=1000)
    termination_grace_seconds: float = Field(default=30.0, ge=0, le=3600)
    min_runtime_seconds: float = Field(default=0.0, ge=0)
    deep_health_check_passed_nodes_only: bool = False


class ResolvedJob(BaseModel):
    """A JobSpec checked against a cluster spec: the instance type, the request per replica, the priority."""

    model_config = ConfigDict(frozen=True)

    instance_type: str
    per_replica: tuple[int, int, int]
    priority: int

    @property
    def request(self) -> Res:
        return Res(*self.per_replica)


def resolve_job(job: JobSpec, spec: ClusterSpec) -> ResolvedJob:
    """Check a job against the cluster spec. Raises ValueError with a message a user can act on."""
    team = spec.team(job.team)
    if team is None:
        names = ", ".join(t.name for t in spec.teams) or "none defined"
        raise ValueError(f"team {job.team!r} does not exist (teams: {names})")
    cat = spec.catalog()
    itype_name = job.instance_type
    if itype_name is None:
        types = sorted({g.instance_type for g in spec.cluster.instance_groups})
        if len(types) != 1:
            raise ValueError(f"the cluster has several instance types; name one with instance_type ({', '.join(types)})")
        itype_name = types[0]
    if itype_name not in cat:
        raise ValueError(f"unknown instance type {itype_name!r}")
    itype: InstanceType = cat[itype_name]
    if job.accelerators is None and job.vcpu is None and job.memory_gib is None:
        per = node_res(itype)
    else:
        per = by_ratio(itype, job.accelerators, job.vcpu, job.memory_gib)
    whole = node_res(itype)
    if not per.fits_in(whole):
        raise ValueError(
            f"each replica asks for {per.acc} accelerators / {per.vcpu:g} vCPU / {per.memory_gib:g} GiB, "
            f"more than one {itype_name} node has ({whole.acc} / {whole.vcpu:g} / {whole.memory_gib:g})"
        )
    if per.acc == 0 and per.mcpu == 0 and per.mib == 0:
        raise ValueError("the job asks for no resources at all")
    if job.priority is not None:
        try:
            prio = spec.priority_weight(job.priority)
        except KeyError:
            valid = ", ".join(p.name for p in spec.policy.priority_classes) or "none defined"
            raise ValueError(f"unknown priority class {job.priority!r} (valid: {valid})") from None
    else:
        prio = -1
    return ResolvedJob(instance_type=itype_name, per_replica=tuple(per), priority=prio)
