"""The cluster of the spec and its teams: instance groups, the executor, mounts, quotas, sharing, limits,
budgets, groups of teams and ``ClusterSpec`` that holds them with the policy (fairpod.model.policy)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from fairpod.model.catalog import BUILTIN_INSTANCE_TYPES, GpuThresholds, InstanceType, partitioned
from fairpod.model.fields import (
    NAME_PATTERN,
    TOPOLOGY_VALUE,
    USER_PATTERN,
    NodeRecovery,
    PreemptTeamTasks,
    SharingStrategy,
    Strict,
)
from fairpod.model.policy import Policy, PriorityClass
from fairpod.model.resources import ZERO, Res, by_ratio, node_res


class Connectivity(Strict):
    """Thresholds of the InstanceConnectivity check: each ring link must reach both."""

    min_mib_per_s: float = Field(default=50.0, gt=0)
    max_latency_ms: float = Field(default=20.0, gt=0)


class InstanceGroup(Strict):
    name: str = Field(pattern=NAME_PATTERN, max_length=40)
    instance_type: str
    count: int = Field(ge=0, le=10_000)
    deep_health_checks: list[str] = Field(default_factory=list)
    connectivity: Connectivity = Field(default_factory=Connectivity)
    # gpus: a node's accelerators are this host's NVIDIA GPUs (replicas get CUDA_VISIBLE_DEVICES, the deep
    # health check tests the devices); slots: they are counted only (a demo, or a laptop's GPU left alone)
    accelerators_are: Literal["gpus", "slots"] = "slots"
    gpu_thresholds: GpuThresholds | None = None  # overrides the catalog's thresholds for this group's GPUs
    # where its nodes sit in the cluster's topology (cluster.topology_levels): level -> domain, e.g.
    # {block: b1, rack: r3}; node_topology overrides it per node (by node name, ``<group>-<i>``)
    topology: dict[str, str] = Field(default_factory=dict, max_length=16)
    node_topology: dict[str, dict[str, str]] = Field(default_factory=dict, max_length=10_000)
    # MIG: every GPU of the group's nodes is split into this profile's partitions, which jobs and quotas count as
    # the accelerators of the instance type <instance_type>.<profile> (docs/placement.md)
    accelerator_partition_type: str | None = Field(default=None, pattern=r"^mig-[0-9]+g\.[0-9]+gb$")

    @property
    def node_type(self) -> str:
        """The instance type of the group's nodes: its own, or its MIG-partitioned form."""
        p = self.accelerator_partition_type
        return f"{self.instance_type}.{p}" if p else self.instance_type


class ExecutorInfo(Strict):
    """Where jobs run: ``local`` (this machine) or ``ray`` (the nodes of a Ray cluster, see docs/ray.md; the
    nodes then come from Ray and ``instance_groups``, if given, only bound the quotas)."""

    kind: str = "local"  # an executor of fairpod.executors.registry that a spec may name
    ray_address: str = Field(default="auto", max_length=300)  # auto | HOST:PORT of the Ray head's GCS
    ray_namespace: str = Field(default="fairpod", pattern=NAME_PATTERN, max_length=60)

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        from fairpod.executors import registry  # a leaf module: the names only

        if v not in registry.names(in_spec=True):
            raise ValueError(f"Input should be {' or '.join(repr(n) for n in registry.names(in_spec=True))}")
        return v

    @field_validator("ray_address")
    @classmethod
    def _address(cls, v: str) -> str:
        if v != "auto" and not re.fullmatch(r"\[?[A-Za-z0-9.:-]+\]?:[0-9]{1,5}", v):
            raise ValueError("must be auto or HOST:PORT (the Ray head's GCS address, e.g. 10.0.0.5:6379)")
        return v


class MountsInfo(Strict):
    """Where a job's host paths may be (fairpod.sandbox.hostpaths, docs/isolation.md "Host paths"): a container's
    mounts (``--mount``, pyxis ``--container-mounts``, PyTorchJob ``hostPath``, ``hyp --volume``) and a job's
    ``--workdir`` only inside these directories, after symlinks are resolved; fairpod's own directories never."""

    allow: list[str] = Field(default_factory=lambda: ["/"], max_length=256)

    @field_validator("allow")
    @classmethod
    def _allow(cls, v: list[str]) -> list[str]:
        for p in v:
            if not p.startswith("/") or "\x00" in p or any(x == ".." for x in p.split("/")) or len(p) > 4096:
                raise ValueError(f"{p!r}: each entry must be an absolute directory path without '..' "
                                 "(e.g. /home or /fsx/datasets)")
        return v


class ClusterInfo(Strict):
    name: str = Field(default="fairpod", pattern=NAME_PATTERN, max_length=40)
    instance_groups: list[InstanceGroup] = Field(default_factory=list)
    node_recovery: NodeRecovery = NodeRecovery.AUTOMATIC
    executor: ExecutorInfo = Field(default_factory=ExecutorInfo)
    # OS user every replica runs as (fairpod must run as root to switch); a team's own run_as wins
    run_as: str | None = Field(default=None, pattern=USER_PATTERN, max_length=32)
    # who a fairpod user is: ``token`` (users and tokens made by the admin) or ``unix`` (a fairpod user is a Unix
    # account of the machine: the CLI is recognised by its uid on the control plane's Unix socket, by MUNGE
    # credentials from other hosts, or by a token; its jobs run as that account; docs/identity.md)
    identity: Literal["token", "unix"] = "token"
    # the network topology's levels, outermost first (e.g. [block, rack]; the host is implied below the last):
    # jobs may ask for all their replicas in one domain of a level (docs/placement.md)
    topology_levels: list[str] = Field(default_factory=list, max_length=8)
    # where jobs' checkpoint directories live (<dir>/<team>/<job>); default $FAIRPOD_HOME/checkpoints. On a
    # cluster of several hosts: a shared file system mounted at this path on every node (docs/ray.md)
    checkpoint_dir: str | None = Field(default=None, max_length=1024)
    # required: jobs run only on nodes that enforce cpu, memory, devices and files (docs/isolation.md); others
    # wait with the reason. best-effort (default): what the node cannot enforce is said, and jobs run anyway
    isolation: Literal["best-effort", "required"] = "best-effort"
    # the host directories a job may name (container mounts, --workdir): docs/isolation.md, "Host paths"
    mounts: MountsInfo = Field(default_factory=MountsInfo)

    @field_validator("checkpoint_dir")
    @classmethod
    def _checkpoint_dir(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("/") or "\x00" in v or any(p == ".." for p in v.split("/"))):
            raise ValueError("must be an absolute path without '..' (shared storage mounted at the "
                             "same path on every node, e.g. /mnt/shared/fairpod-checkpoints)")
        return v


class QuotaEntry(Strict):
    instance_type: str
    count: int | None = Field(default=None, ge=0, le=10_000)
    accelerators: float | None = Field(default=None, ge=0)
    vcpu: float | None = Field(default=None, ge=0)
    memory_gib: float | None = Field(default=None, ge=0)

    def resolve(self, itype: InstanceType) -> Res:
        """The quota as a resource vector; count means whole nodes, the rest fill by ratio."""
        if self.count is not None:
            return node_res(itype).scale(self.count) if self.count else ZERO
        return by_ratio(itype, self.accelerators, self.vcpu, self.memory_gib)


class LimitEntry(QuotaEntry):
    """A limit per instance type, in the same units as a quota: count (whole nodes) or accelerators/vcpu/memory."""


class Sharing(Strict):
    strategy: SharingStrategy = SharingStrategy.LEND_AND_BORROW
    borrow_limit: int = Field(default=50, ge=1, le=500)
    # per instance type: the most of its idle quota the team lends (it keeps quota - limit for itself; Kueue's
    # lendingLimit), and the most it borrows in absolute terms, besides borrow_limit % (HyperPod's
    # AbsoluteBorrowLimits)
    lending_limits: list[LimitEntry] = Field(default_factory=list)
    absolute_borrow_limits: list[LimitEntry] = Field(default_factory=list)


class UserLimits(Strict):
    """Per-user rules inside a team (Slurm's MaxTRESPerUser, KAI's per-user fairness)."""

    # the most accelerators one user's running jobs may hold at once; None: no cap
    max_running_accelerators: int | None = Field(default=None, ge=1, le=1_000_000)
    # FirstComeFirstServe: the team's queue order; RoundRobin: the next job comes from the user who runs the
    # fewest accelerators in the team now (ties: the earlier job), so users take turns
    queue_order: Literal["FirstComeFirstServe", "RoundRobin"] = "FirstComeFirstServe"


class Budget(Strict):
    """A team's accelerator-hours per period on one instance type: past 80 % its jobs count as the lowest
    priority, past 100 % it may not borrow, and with ``hard_cap`` its jobs of that type wait for the next period."""

    instance_type: str
    period: Literal["day", "week", "month"]
    accelerator_hours: float = Field(gt=0, le=1e9)
    hard_cap: bool = False


class Group(Strict):
    """A node of the tree of groups (a lab, its groups, ...): its quota is its own ``quota`` and the sum of its
    teams' and groups' quotas below it;
    ``sharing`` says whether and how much the subtree lends and borrows towards the rest of the tree, the borrow
    limit in percent of the group's quota; ``fair_share_weight`` weighs it against its siblings."""

    name: str = Field(pattern=NAME_PATTERN, max_length=40)
    parent: str | None = None
    fair_share_weight: int = Field(default=1, ge=0, le=100)
    sharing: Sharing = Field(default_factory=Sharing)
    # quota the group holds itself (Kueue's Cohort resourceGroups), shared by every team below it before anyone
    # outside; the group's quota is this plus its teams' and groups' below it
    quota: list[QuotaEntry] = Field(default_factory=list)


class Team(Strict):
    name: str = Field(pattern=NAME_PATTERN, max_length=40)
    group: str | None = None  # the group it belongs to (``groups``); none: the top of the tree
    fair_share_weight: int = Field(default=0, ge=0, le=100)
    preempt_team_tasks: PreemptTeamTasks = PreemptTeamTasks.LOWER_PRIORITY
    sharing: Sharing = Field(default_factory=Sharing)
    quota: list[QuotaEntry] = Field(default_factory=list)
    run_as: str | None = Field(default=None, pattern=USER_PATTERN, max_length=32)  # OS user of its replicas
    # under cluster.identity unix: the members of this Unix group are members of the team (docs/identity.md)
    unix_group: str | None = Field(default=None, pattern=USER_PATTERN, max_length=32)
    user_limits: UserLimits = Field(default_factory=UserLimits)
    budgets: list[Budget] = Field(default_factory=list, max_length=64)
    # what Kubernetes manifests call the team (docs/kubernetes.md); none listed: HyperPod's names for it
    namespaces: list[str] = Field(default_factory=list, max_length=32,
                                  description="Kubernetes namespaces whose jobs are this team's (default: "
                                  "HyperPod's hyperpod-ns-<team>)")
    local_queues: list[str] = Field(default_factory=list, max_length=32,
                                    description="Kueue LocalQueue names (kueue.x-k8s.io/queue-name) that are this "
                                    "team's (default: HyperPod's hyperpod-ns-<team>-localqueue)")

    @field_validator("namespaces", "local_queues")
    @classmethod
    def _dns_labels(cls, v: list[str]) -> list[str]:
        for n in v:
            if not re.match(NAME_PATTERN, n) or len(n) > 63:
                raise ValueError(f"{n!r} is not a Kubernetes name (lower-case letters, digits and '-', at most 63)")
        if len(set(v)) != len(v):
            raise ValueError("a name is listed twice")
        return v


class ClusterSpec(Strict):
    cluster: ClusterInfo = Field(default_factory=ClusterInfo)
    instance_types: list[InstanceType] = Field(default_factory=list)
    policy: Policy = Field(default_factory=Policy)
    groups: list[Group] = Field(default_factory=list)
    teams: list[Team] = Field(default_factory=list)

    # -- derived views -------------------------------------------------------------------------
    def catalog(self) -> dict[str, InstanceType]:
        cat = dict(BUILTIN_INSTANCE_TYPES)
        for t in self.instance_types:
            cat[t.name] = t
        for g in self.cluster.instance_groups:  # MIG-partitioned types of the groups that split their GPUs
            base = cat.get(g.instance_type)
            if g.accelerator_partition_type and base is not None and g.node_type not in cat:
                try:
                    cat[g.node_type] = partitioned(base, g.accelerator_partition_type)
                except ValueError:
                    pass  # check_spec reports it
        return cat

    def capacity(self) -> dict[str, Res]:
        """Whole-cluster capacity per instance type (all nodes, healthy or not)."""
        cat = self.catalog()
        out: dict[str, Res] = {}
        for g in self.cluster.instance_groups:
            one = node_res(cat[g.node_type]).scale(g.count)
            out[g.node_type] = out.get(g.node_type, ZERO) + one
        return out

    def group_quota(self, group: Group) -> dict[str, Res]:
        """The quota a group holds itself (not its teams'), per instance type."""
        cat = self.catalog()
        return {q.instance_type: q.resolve(cat[q.instance_type]) for q in group.quota}

    def team_quota(self, team: Team) -> dict[str, Res]:
        cat = self.catalog()
        out: dict[str, Res] = {}
        for q in team.quota:
            out[q.instance_type] = out.get(q.instance_type, ZERO) + q.resolve(cat[q.instance_type])
        return out

    def node_topology(self, group: str, name: str, labels: dict[str, Any] | None = None) -> tuple[str, ...]:
        """The domain of node ``name`` (of instance group ``group``) at each topology level, outermost first:
        the spec's ``node_topology``, else its group's ``topology``, else the node's label of that name (a Ray
        node's labels); "" where none says."""
        g = next((g for g in self.cluster.instance_groups if g.name == group), None)
        own = g.node_topology.get(name, {}) if g is not None else {}
        grp = g.topology if g is not None else {}
        labels = labels or {}
        out = []
        for level in self.cluster.topology_levels:
            v = own.get(level) or grp.get(level) or labels.get(level)
            out.append(v if isinstance(v, str) and re.fullmatch(TOPOLOGY_VALUE, v) else "")
        return tuple(out)

    def team_limits(self, entries: list[LimitEntry]) -> dict[str, Res]:
        """Limits per instance type (lending_limits, absolute_borrow_limits) as resource vectors."""
        cat = self.catalog()
        return {e.instance_type: e.resolve(cat[e.instance_type]) for e in entries}

    def gpus_are_real(self, group: str) -> bool:
        """Whether the accelerators of an instance group's nodes are real GPUs (``accelerators_are: gpus``)."""
        return any(g.name == group and g.accelerators_are == "gpus" for g in self.cluster.instance_groups)

    def run_as(self, team: str) -> str | None:
        """The OS user a team's replicas run as: the team's ``run_as``, else the cluster's, else None."""
        t = next((t for t in self.teams if t.name == team), None)
        return (t.run_as if t is not None else None) or self.cluster.run_as

    def priority_class(self, name: str | None) -> PriorityClass | None:
        return next((pc for pc in self.policy.priority_classes if pc.name == name), None) if name else None

    def runtime_limit(self, job_max: float | None, priority: str | None) -> tuple[float | None, str]:
        """(the runtime limit of a job that asked for ``job_max`` in class ``priority`` — its own, else the
        class's default, at most the class's maximum; None: no limit —, what happens at it: fail | requeue)."""
        pc = self.priority_class(priority)
        if pc is None:
            return job_max, "fail"
        limit = job_max if job_max is not None else pc.default_max_runtime_seconds
        if pc.max_runtime_seconds is not None:
            limit = pc.max_runtime_seconds if limit is None else min(limit, pc.max_runtime_seconds)
        return limit, pc.on_runtime_limit

    def priority_weight(self, name: str | None) -> int:
        """Weight of a priority class; no class means the lowest priority (-1)."""
        if name is None:
            return -1
        for pc in self.policy.priority_classes:
            if pc.name == name:
                return pc.weight
        raise KeyError(name)

    def group(self, name: str) -> Group | None:
        return next((g for g in self.groups if g.name == name), None)

    def groups_top_down(self) -> list[Group]:
        """The groups, every parent before its children (the spec's order otherwise)."""
        out: list[Group] = []
        done: set[str] = set()
        left = list(self.groups)
        while left:
            ready = [g for g in left if g.parent is None or g.parent in done]
            if not ready:
                break  # a cycle (check_spec reports it)
            out += ready
            done.update(g.name for g in ready)
            left = [g for g in left if g.name not in done]
        return out

    def team(self, name: str) -> Team | None:
        return next((t for t in self.teams if t.name == name), None)
