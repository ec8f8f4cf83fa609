"""Jobs: what a user submits (JobSpec), the states a job goes through, and the events it leaves."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fairpod.model.catalog import InstanceType
from fairpod.model.logrules import LogRule
from fairpod.model.resources import Res, by_ratio, node_res, partition_share
from fairpod.model.services import RAY_NODE_READY, ServiceSpec
from fairpod.model.spec import NAME_PATTERN, ClusterSpec, did_you_mean, no_bool_numbers


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


MAX_ARGS = 4096  # words of a command
MAX_ENV = 512  # variables of a job's env
MAX_TEXT = 128 * 1024  # bytes of a command, of an env
ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")
LABEL_KEY = re.compile(r"(?:[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


class JobSpec(BaseModel):
    """A job as submitted: ``nodes`` replicas of one instance type, each on its own node."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(pattern=NAME_PATTERN, max_length=63)
    team: str = Field(pattern=NAME_PATTERN, max_length=40)
    priority: str | None = None
    instance_type: str | None = None
    nodes: int = Field(default=1, ge=1, le=10_000)
    min_nodes: int | None = Field(default=None, ge=1, le=10_000,
                                  description="elastic: the fewest replicas it runs with (default nodes)")
    max_nodes: int | None = Field(default=None, ge=1, le=10_000,
                                  description="elastic: it grows into idle capacity up to this many replicas and "
                                  "shrinks back (never below min_nodes) instead of being preempted whole")
    accelerators: float | None = Field(default=None, ge=0, le=1024, description="per node; default the whole node")
    vcpu: float | None = Field(default=None, gt=0, le=100_000, description="per node; default by ratio")
    memory_gib: float | None = Field(default=None, gt=0, le=10_000_000, description="per node; default by ratio")
    command: list[str] = Field(default_factory=list, max_length=MAX_ARGS)
    env: dict[str, str] = Field(default_factory=dict, max_length=MAX_ENV)
    workdir: str | None = Field(default=None, max_length=4096)
    auto_resume: bool = False
    max_retry: int = Field(default=0, ge=0, le=1000)
    termination_grace_seconds: float = Field(default=30.0, ge=0, le=3600)
    min_runtime_seconds: float = Field(default=0.0, ge=0, le=7 * 86400,
                                       description="protection from preemption; at most policy.max_min_runtime_seconds")
    expected_duration_seconds: float | None = Field(
        default=None, gt=0, le=365 * 86400,
        description="how long the job is expected to run once started: the engine backfills capacity held for a "
        "starving job with it, and other jobs' estimated start times count on it")
    deep_health_check_passed_nodes_only: bool = False
    max_runtime_seconds: float | None = Field(
        default=None, ge=1, le=365 * 86400,
        description="SIGTERM + grace at this runtime (of the attempt), then Failed 'runtime limit' or requeued as "
        "the priority class says; default and maximum from the class")
    hang_timeout_seconds: float | None = Field(
        default=None, ge=10, le=30 * 86400,
        description="hung when no progress report and no output (or only idle GPUs) for this long")
    user: str | None = Field(default=None, max_length=64,
                             description="who submitted it; the server sets it to the caller (per-user limits)")
    umask: str | None = Field(default=None, pattern=r"^0?[0-7]{3}$",
                              description="the submitter's umask (octal), that of the files its replicas make "
                              "when they run as the submitter (cluster.identity unix); the CLI sends its own")
    hang_action: Literal["notify", "restart", "cancel"] = Field(
        default="notify", description="what a hang does: an event, a restart (counts against max_retry), a cancel")
    required_topology: str | None = Field(
        default=None, pattern=NAME_PATTERN, max_length=40,
        description="a topology level (e.g. rack): all replicas in one domain of it, else the job waits")
    preferred_topology: str | None = Field(
        default=None, pattern=NAME_PATTERN, max_length=40,
        description="a topology level: replicas in as few domains of it as fit now")
    accelerator_partition_type: str | None = Field(
        default=None, pattern=r"^mig-[0-9]+g\.[0-9]+gb$",
        description="a MIG profile (e.g. mig-1g.10gb): the replicas run on nodes whose GPUs are split into it")
    accelerator_partition_count: int | None = Field(default=None, ge=1, le=1024,
                                                    description="MIG partitions per replica (default 1)")
    ray: bool = Field(default=False, description="a Ray job: a private Ray cluster on its replicas (head on rank 0, "
                      "workers on the others, each with exactly its resources) and the command run against it")
    service: ServiceSpec | None = Field(
        default=None, description="a service: replicas run until deleted, restarted when they exit, behind a stable "
        "address (fairpod.model.services; nodes..max_nodes are its min..max replicas)")
    image: str | None = Field(default=None, min_length=1, max_length=1024, pattern=r"^[^\s]+$",
                              description="a container image: each replica runs its command in it (docs/containers.md)")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="as Kubernetes: default Always for :latest or no tag, else IfNotPresent")
    replace_entrypoint: bool = Field(
        default=False, description="with image: the command replaces the image's ENTRYPOINT (a Kubernetes "
        "container's command); default: the command is the ENTRYPOINT's arguments (podman run IMAGE CMD, a "
        "Kubernetes container's args)")
    mounts: list[str] = Field(default_factory=list, max_length=64,
                              description="with image: HOST:CONTAINER[:ro] directories bound into the container")
    scratch: list[str] = Field(default_factory=list, max_length=16,
                               description="with image: PATH[:MIB] empty directories of the replica's own in memory "
                               "(a tmpfs counted in its memory; /dev/shm sized), gone when it ends (Kubernetes' "
                               "emptyDir)")
    labels: dict[str, str] = Field(
        default_factory=dict, max_length=64,
        description="the submitter's own labels (a HyperPod config's custom_labels, a manifest's): shown with the "
        "job, nothing else reads them")
    # resilience (docs/resilience.md): gang readiness and restarts in place
    ready_timeout_seconds: float | None = Field(
        default=None, ge=1, le=7 * 86400,
        description="gang readiness: every replica must have started (with ready_signal sdk: called "
        "fairpod.sdk.ready()) within this long of the start, else the attempt is stopped and requeued with "
        "backoff; default policy.ready_timeout_seconds")
    ready_signal: Literal["started", "sdk"] = Field(
        default="started", description="what makes a replica ready: its process started, or (sdk) its call of "
        "fairpod.sdk.ready() or a progress report")
    restarts_in_place: int = Field(
        default=0, ge=0, le=100,
        description="a failed replica's process is restarted on its node, the others left running, up to this "
        "many times within restart_eval_period_seconds; then the job restarts whole (max_retry)")
    restart_eval_period_seconds: float = Field(
        default=3600.0, ge=1, le=30 * 86400, description="the window restarts_in_place counts restarts in")
    peer_recovery: bool = Field(
        default=False, description="a replica restarted in place gets its state from a peer's memory "
        "(fairpod.sdk.peers) and the job goes on from the step it was at; a second replica lost while one is "
        "recovered restarts the job from its checkpoint. Needs restarts_in_place >= 1")
    log_rules: list[LogRule] = Field(
        default_factory=list, max_length=20,
        description="rules over the replicas' output, each with an action (docs/resilience.md); added to the "
        "priority class's")

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data: Any) -> Any:
        return no_bool_numbers(cls, data)

    @model_validator(mode="after")
    def _sane_strings(self) -> JobSpec:
        """Every string is valid UTF-8 without NUL bytes (what a process can be given) and the command and
        environment stay within MAX_TEXT bytes each: checked before anything is stored or started."""
        for what, texts in (("command", self.command), ("env", [*self.env, *self.env.values()]),
                            ("workdir", [self.workdir or ""])):
            size = 0
            for t in texts:
                try:
                    size += len(t.encode("utf-8"))
                except UnicodeEncodeError:
                    raise ValueError(f"{what} holds text that is not valid UTF-8 (a lone surrogate)") from None
                if "\0" in t:
                    raise ValueError(f"{what} holds a NUL byte, which no process can be given")
            if size > MAX_TEXT:
                raise ValueError(f"{what} is {size} bytes; at most {MAX_TEXT} bytes are accepted")
        for key, value in self.labels.items():
            if not LABEL_KEY.fullmatch(key) or len(value) > 63 or not LABEL_VALUE.fullmatch(value):
                raise ValueError(f"label {key[:80]!r}: {value[:80]!r}: a label is [PREFIX/]NAME (letters, digits, "
                                 "-_. at most 63) with a value of at most 63 such characters, as in Kubernetes")
        for key in self.env:
            if not ENV_KEY.fullmatch(key):
                raise ValueError(f"env name {key[:60]!r} is not a valid variable name (letters, digits, _)")
        return self

    @model_validator(mode="after")
    def _container(self) -> JobSpec:
        """``image_pull_policy`` and ``mounts`` go with an ``image``; each mount is ``HOST:CONTAINER[:ro]`` with
        absolute paths."""
        if self.image is None and (self.mounts or self.image_pull_policy or self.scratch or self.replace_entrypoint):
            raise ValueError("image_pull_policy, mounts, scratch and replace_entrypoint need an image")
        for d in self.scratch:
            path, _, size = d.partition(":")
            if not path.startswith("/") or path == "/" or ".." in path.split("/") or (size and not (
                    size.isdigit() and 1 <= int(size) <= 1 << 30)):
                raise ValueError(f"scratch {d!r}: give PATH or PATH:MIB, an absolute path in the container (not /) "
                                 "and a size in MiB")
        for m in self.mounts:
            parts = m.split(":")
            if len(parts) not in (2, 3) or not all(x.startswith("/") for x in parts[:2]) or \
                    (len(parts) == 3 and parts[2] not in ("ro", "rw")):
                raise ValueError(f"mount {m!r}: give HOST:CONTAINER or HOST:CONTAINER:ro, both absolute paths")
        return self

    @model_validator(mode="after")
    def _elastic(self) -> JobSpec:
        """``min_nodes``/``max_nodes``: 1 <= min <= max; ``nodes`` is the minimum (the gang it starts with)."""
        if self.min_nodes is None and self.max_nodes is None:
            return self
        if self.max_nodes is None:
            raise ValueError("min_nodes needs max_nodes (an elastic job runs with min_nodes..max_nodes replicas)")
        lo = self.min_nodes
        if lo is None:
            lo = self.nodes if "nodes" in self.model_fields_set else 1
        elif "nodes" in self.model_fields_set and self.nodes != lo:
            raise ValueError(f"nodes {self.nodes} and min_nodes {lo} differ: an elastic job starts with "
                             "min_nodes; give one of them")
        if lo > self.max_nodes:
            raise ValueError(f"min_nodes {lo} is more than max_nodes {self.max_nodes}")
        object.__setattr__(self, "nodes", lo)
        object.__setattr__(self, "min_nodes", lo)
        return self

    @model_validator(mode="after")
    def _ray_nodes_ready(self) -> JobSpec:
        """A Ray service (a standing Ray cluster: a KubeRay RayCluster) with no readiness check of its own: a
        replica is ready while its Ray node is ALIVE in the head's node table (the launcher keeps
        ``RAY_NODE_READY``'s file while it is, fairpod.executors.raycluster), not while its port merely answers."""
        if self.ray and self.service is not None and self.service.readiness_path is None \
                and self.service.readiness_command is None:
            object.__setattr__(self, "service", self.service.model_copy(update={"readiness_command": RAY_NODE_READY}))
        return self

    @model_validator(mode="after")
    def _peer_recovery(self) -> JobSpec:
        if self.peer_recovery and self.restarts_in_place < 1:
            raise ValueError("peer_recovery needs restarts_in_place >= 1 (how many replicas may be recovered from "
                             "their peers within restart_eval_period_seconds)")
        if self.peer_recovery and (self.nodes < 2 or self.elastic):
            raise ValueError("peer_recovery needs a job of at least 2 replicas, not elastic (a replica recovers "
                             "from a peer's memory)")
        return self

    @property
    def elastic(self) -> bool:
        return self.max_nodes is not None and self.max_nodes > self.nodes

    @property
    def kind(self) -> str:
        """``service``, ``ray`` or ``job`` (``fairpod.governance.kinds``: what each means to the engine); a space
        (``fairpod.model.spaces``) is a job: it borrows and is preempted as one."""
        if self.service is not None and self.service.space is None:
            return "service"
        return "ray" if self.ray else "job"


class ResolvedJob(BaseModel):
    """A JobSpec checked against a cluster spec: the instance type, the request per replica, the priority."""

    model_config = ConfigDict(frozen=True)

    instance_type: str
    per_replica: tuple[int, int, int]
    priority: int
    # ``instance_type: a,b``: the types it may run on instead of the first, in order, with the request on each
    fallbacks: tuple[tuple[str, tuple[int, int, int]], ...] = ()

    @property
    def request(self) -> Res:
        return Res(*self.per_replica)


def _partitioned_type(job: JobSpec, spec: ClusterSpec) -> str:
    """The MIG-partitioned instance type a job asking for ``accelerator_partition_type`` runs on."""
    p = job.accelerator_partition_type
    groups = [g for g in spec.cluster.instance_groups if g.accelerator_partition_type == p
              and job.instance_type in (None, g.instance_type, g.node_type)]
    types = sorted({g.node_type for g in groups})
    if not types:
        have = sorted({g.node_type for g in spec.cluster.instance_groups if g.accelerator_partition_type})
        where = f" of {job.instance_type}" if job.instance_type else ""
        raise ValueError(f"accelerator_partition_type: no instance group{where} splits its GPUs into {p} "
                         f"(partitioned types: {', '.join(have) or 'none'})")
    if len(types) > 1:
        raise ValueError(f"accelerator_partition_type: {p} exists on several instance types; name one with "
                         f"instance_type ({', '.join(t.rsplit('.', 2)[0] for t in types)})")
    return types[0]


def resolve_job(job: JobSpec, spec: ClusterSpec) -> ResolvedJob:
    """Check a job against the cluster spec. Raises ValueError with a message a user can act on. An instance_type
    of several types, comma-separated in order of preference, resolves each (the same replicas and request)."""
    names = [x.strip() for x in (job.instance_type or "").split(",")]
    if len(names) > 1:
        if not all(names) or len(set(names)) != len(names):
            raise ValueError(f"instance_type {job.instance_type!r}: name each instance type once, comma-separated "
                             "in order of preference")
        if job.accelerator_partition_type is not None or job.max_nodes is not None:
            raise ValueError("several instance types go with neither accelerator_partition_type nor elastic "
                             "min_nodes/max_nodes")
        each = [_resolve_one(job.model_copy(update={"instance_type": n}), spec) for n in names]
        return each[0].model_copy(update={"fallbacks": tuple((r.instance_type, r.per_replica) for r in each[1:])})
    return _resolve_one(job, spec)


def _resolve_one(job: JobSpec, spec: ClusterSpec) -> ResolvedJob:
    team = spec.team(job.team)
    if team is None:
        names = ", ".join(t.name for t in spec.teams) or "none defined"
        raise ValueError(f"team {job.team!r} does not exist (teams: {names})")
    cat = spec.catalog()
    itype_name = job.instance_type
    partitions = job.accelerator_partition_count
    if job.accelerator_partition_type is not None:
        itype_name = _partitioned_type(job, spec)
        partitions = partitions or 1
        if job.accelerators is not None:
            raise ValueError("give accelerators or accelerator_partition_count, not both (a partitioned node's "
                             "accelerators are its MIG partitions)")
    elif partitions is not None:
        raise ValueError("accelerator_partition_count needs accelerator_partition_type (e.g. mig-1g.10gb)")
    if itype_name is None:
        types = sorted({g.node_type for g in spec.cluster.instance_groups})
        if len(types) != 1:
            raise ValueError(f"the cluster has several instance types; name one with instance_type ({', '.join(types)})")
        itype_name = types[0]
    if itype_name not in cat:
        raise ValueError(f"unknown instance type {itype_name!r}{did_you_mean(itype_name, cat)}")
    itype: InstanceType = cat[itype_name]
    if partitions is not None:
        job = job.model_copy(update={"accelerators": float(partitions)})
    if job.accelerators is not None and job.accelerators != int(job.accelerators):
        raise ValueError(f"accelerators {job.accelerators:g}: a replica gets whole accelerators; give a whole "
                         "number (or none for the whole node)")
    if job.accelerators is None and job.vcpu is None and job.memory_gib is None:
        per = node_res(itype)
    else:
        per = by_ratio(itype, job.accelerators, job.vcpu, job.memory_gib)
        if partitions is not None and job.vcpu is None and job.memory_gib is None:
            per = partition_share(itype, partitions)
    whole = node_res(itype)
    if not per.fits_in(whole):
        raise ValueError(
            f"each replica asks for {per.acc} accelerators / {per.vcpu:g} vCPU / {per.memory_gib:g} GiB, "
            f"more than one {itype_name} node has ({whole.acc} / {whole.vcpu:g} / {whole.memory_gib:g})"
        )
    if per.acc == 0 and per.mcpu == 0 and per.mib == 0:
        raise ValueError("the job asks for no resources at all")
    if job.max_nodes is not None:
        have = sum(g.count for g in spec.cluster.instance_groups if g.node_type == itype_name)
        if job.max_nodes > have:
            raise ValueError(f"max_nodes {job.max_nodes} is more than the {have} {itype_name} nodes of the cluster "
                             "(one replica per node)")
    bound = spec.policy.max_min_runtime_seconds
    if job.min_runtime_seconds > bound:
        raise ValueError(f"min_runtime_seconds: {job.min_runtime_seconds:g} s is above the cluster's maximum of "
                         f"{bound:g} s (policy.max_min_runtime_seconds)")
    pc = spec.priority_class(job.priority)
    if pc is not None and pc.max_runtime_seconds is not None and job.max_runtime_seconds is not None \
            and job.max_runtime_seconds > pc.max_runtime_seconds:
        raise ValueError(f"max_runtime_seconds: {job.max_runtime_seconds:g} s is above the {pc.name!r} class's maximum "
                         f"of {pc.max_runtime_seconds:g} s")
    levels = spec.cluster.topology_levels
    if job.required_topology is not None and job.preferred_topology is not None:
        raise ValueError("give required_topology or preferred_topology, not both")
    for what, level in (("required_topology", job.required_topology), ("preferred_topology", job.preferred_topology)):
        if level is not None and level not in levels:
            raise ValueError(f"{what}: the cluster has no topology level {level!r} (cluster.topology_levels: "
                             f"{', '.join(levels) or 'none defined'})")
    if job.priority is not None:
        try:
            prio = spec.priority_weight(job.priority)
        except KeyError:
            valid = ", ".join(p.name for p in spec.policy.priority_classes) or "none defined"
            raise ValueError(f"unknown priority class {job.priority!r} (valid: {valid})") from None
    else:
        prio = -1
    return ResolvedJob(instance_type=itype_name, per_replica=(per.acc, per.mcpu, per.mib), priority=prio)


def fallback_choices(job: JobSpec, spec: ClusterSpec) -> tuple[tuple[str, Res], ...]:
    """Every (instance type, request per replica) of a job naming several types, in order; () for one type (or
    one the spec no longer resolves: the job keeps the type it was stored with)."""
    if "," not in (job.instance_type or ""):
        return ()
    try:
        r = resolve_job(job, spec)
    except ValueError:
        return ()
    return ((r.instance_type, Res(*r.per_replica)), *((it, Res(*per)) for it, per in r.fallbacks))
