"""The cluster spec: instance groups, custom instance types, cluster policy and teams.

``load_spec`` / ``parse_spec`` turn YAML or a dict into a ``ClusterSpec`` and report every problem at once,
each naming its field, as a ``SpecError``.

Longer than fairpod's usual module (~600 lines): the spec's pydantic types and the cross-field checks that read
several of them at once (``check_spec``) are one schema; they change together when a field is added.
"""

from __future__ import annotations

import re
import typing
from collections import Counter
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fairpod.model.catalog import BUILTIN_INSTANCE_TYPES, GpuThresholds, InstanceType, partitioned
from fairpod.model.logrules import LogRule
from fairpod.model.resources import ZERO, Res, by_ratio, node_res

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
TOPOLOGY_VALUE = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"  # a rack's or block's name (a label value)
USER_PATTERN = r"^[a-z_][a-z0-9_-]*[$]?$"  # a POSIX login name


def did_you_mean(name: str, known: Any) -> str:
    """' (did you mean ml.g5.12xlarge?)' for an instance type written without SageMaker's ``ml.`` prefix or
    with a small typo; '' when nothing is close."""
    if f"ml.{name}" in known:
        return f" (did you mean ml.{name}?)"
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.85)
    return f" (did you mean {close[0]}?)" if close else ""


class TaskPrioritization(StrEnum):
    FIRST_COME_FIRST_SERVE = "FirstComeFirstServe"
    TASK_RANKING = "TaskRanking"


class IdleComputeAllocation(StrEnum):
    FAIR_SHARE = "FairShare"
    FIRST_COME_FIRST_SERVE = "FirstComeFirstServe"
    FAIR_SHARE_HISTORY = "FairShareHistory"  # FairShare, ranking borrowers by their decayed past borrowing too

    @property
    def fair_share(self) -> bool:
        return self in (IdleComputeAllocation.FAIR_SHARE, IdleComputeAllocation.FAIR_SHARE_HISTORY)


class Toggle(StrEnum):
    ENABLED = "Enabled"
    DISABLED = "Disabled"


class SharingStrategy(StrEnum):
    LEND_AND_BORROW = "LendAndBorrow"
    LEND = "Lend"
    DONT_LEND = "DontLend"


class PreemptTeamTasks(StrEnum):
    LOWER_PRIORITY = "LowerPriority"
    NEVER = "Never"
    # lower priority, and equal priority submitted later (Kueue's LowerOrNewerEqualPriority; governance.within_team)
    LOWER_OR_NEWER_EQUAL = "LowerOrNewerEqualPriority"


class NodeRecovery(StrEnum):
    AUTOMATIC = "Automatic"
    NONE = "None"


def no_bool_numbers(cls: type[BaseModel], data: Any) -> Any:
    """Refuse ``true``/``false`` for a number (pydantic would take them as 1 and 0)."""
    if isinstance(data, dict):
        for name, info in cls.model_fields.items():
            value = data.get(name)
            if isinstance(value, bool):
                kinds = set(typing.get_args(info.annotation)) or {info.annotation}
                if bool not in kinds and kinds & {int, float}:
                    raise ValueError(f"{name}: expected a number, got {str(value).lower()}")
    return data


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_enum_values=False, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data: Any) -> Any:
        return no_bool_numbers(cls, data)


class Connectivity(_Strict):
    """Thresholds of the InstanceConnectivity check: each ring link must reach both."""

    min_mib_per_s: float = Field(default=50.0, gt=0)
    max_latency_ms: float = Field(default=20.0, gt=0)


class InstanceGroup(_Strict):
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


class ExecutorInfo(_Strict):
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


class MountsInfo(_Strict):
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


class ClusterInfo(_Strict):
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


class PriorityClass(_Strict):
    name: str = Field(pattern=NAME_PATTERN, max_length=40)
    weight: int = Field(ge=0, le=100)
    # Runtime limits of the class's jobs: the default when a job gives no max_runtime_seconds, the most one may
    # ask for, and what happens at the limit (fail: the job ends Failed "runtime limit"; requeue: it is stopped
    # and goes back to its queue, to resume from its checkpoint).
    default_max_runtime_seconds: float | None = Field(default=None, ge=1, le=365 * 86400)
    max_runtime_seconds: float | None = Field(default=None, ge=1, le=365 * 86400)
    on_runtime_limit: Literal["fail", "requeue"] = "fail"
    # rules over the output of the class's jobs (fairpod.model.logrules); a job's rule of the same name wins
    log_rules: list[LogRule] = Field(default_factory=list, max_length=20)

    @model_validator(mode="after")
    def _default_within_max(self) -> PriorityClass:
        if (self.default_max_runtime_seconds is not None and self.max_runtime_seconds is not None
                and self.default_max_runtime_seconds > self.max_runtime_seconds):
            raise ValueError(f"default_max_runtime_seconds {self.default_max_runtime_seconds:g} is above "
                             f"max_runtime_seconds {self.max_runtime_seconds:g}")
        return self


class Policy(_Strict):
    task_prioritization: TaskPrioritization = TaskPrioritization.FIRST_COME_FIRST_SERVE
    priority_classes: list[PriorityClass] = Field(default_factory=list, max_length=10)
    idle_compute_allocation: IdleComputeAllocation = IdleComputeAllocation.FAIR_SHARE
    idle_resource_sharing: Toggle = Toggle.DISABLED
    # A pending job that fits its team's quota or borrow limit but has waited this long for nodes gets
    # nodes reserved (no other job is placed on them) until it starts: large jobs are never starved
    # by a stream of small ones.
    starvation_guard_seconds: float = Field(default=600.0, ge=0, le=30 * 86400)
    # The longest a job's min_runtime_seconds may protect it from preemption (also from a lender's reclaim:
    # a team is always entitled to its quota within this bound). Longer requests are refused at submit; a
    # job submitted before the bound was lowered is protected for the bound only.
    max_min_runtime_seconds: float = Field(default=3600.0, ge=0, le=7 * 86400)
    # Finished jobs (with their events and logs), events and usage samples older than this many days are
    # deleted (hourly); null keeps everything. Usage reports reach back as far as this keeps.
    retention_days: float | None = Field(default=400.0, ge=1, le=36_500)
    # The most a replica's log (output.log) holds: past it the older half is dropped, and the log's first line says
    # how much was dropped so far (fairpod.executors.logs.CappedLog). A job's output never fills the disk.
    log_max_bytes: int = Field(default=1 << 30, ge=1 << 20, le=1 << 40)
    # FairShareHistory: how fast a team's past borrowing is forgotten; borrowing this long ago counts half.
    fair_share_half_life_seconds: float = Field(default=86400.0, ge=60, le=90 * 86400)
    # Always: a team never uses more than its borrow limits allow. WhileOthersWait: the borrow limits (percent and
    # absolute) bind only while another team has a pending job on that instance type that it may run now (within
    # its quota or its own borrow limit); otherwise a team may borrow all idle lendable capacity (work-conserving,
    # as Kueue's fair sharing bounds borrowing by the others' demand). Lenders reclaim as always.
    borrow_limit_applies: Literal["Always", "WhileOthersWait"] = "Always"
    # Auto-resume restarts after the job's own failure (a replica exited non-zero) back off exponentially, as
    # Kueue's requeuing backoff: restart k waits base x 2^(k-1) seconds, at most max (fairpod.server.core.transitions.backoff);
    # a base of 0 restarts at once. Restarts after a node fault or a hang do not wait.
    restart_backoff_base_seconds: float = Field(default=2.0, ge=0, le=3600)
    restart_backoff_max_seconds: float = Field(default=300.0, ge=0, le=86400)
    # An elastic job that shrank must show life again (a progress report, else output) within this many seconds,
    # or it is hung (its replicas did not re-form their group: e.g. a torchrun rendezvous still waiting for the
    # replica that left); the job's hang_action says what follows (fairpod.server.watchdog). null: never.
    elastic_regroup_timeout_seconds: float | None = Field(default=300.0, ge=1, le=86400)
    # Gang readiness (fairpod.server.core.transitions.readiness, as Kueue's waitForPodsReady): an attempt whose replicas are not all
    # ready this long after its start is stopped, its capacity given back, and requeued after a backoff of base x
    # 2^(k-1) seconds (at most max) for its k-th readiness timeout; after requeue_limit timeouts it fails (null: no
    # limit). A job's ready_timeout_seconds overrides the timeout; null here and there: no readiness check.
    ready_timeout_seconds: float | None = Field(default=None, ge=1, le=7 * 86400)
    ready_backoff_base_seconds: float = Field(default=60.0, ge=0, le=86400)
    ready_backoff_max_seconds: float = Field(default=3600.0, ge=0, le=7 * 86400)
    ready_requeue_limit: int | None = Field(default=None, ge=0, le=10_000)
    # Preemption that costs least (fairpod.governance.preemption): a running job whose next checkpoint is due within
    # this many seconds (it said so: fairpod.sdk.report_progress(next_checkpoint_in=...)) is not preempted before
    # it; and a pending job may trigger preemption only once it has waited preemption_min_wait_seconds. 0: off.
    preemption_checkpoint_wait_seconds: float = Field(default=0.0, ge=0, le=86400)
    preemption_min_wait_seconds: float = Field(default=0.0, ge=0, le=7 * 86400)
    # A reclaim that would destroy much work waits a while for room to free by itself: when the borrowed jobs it
    # would stop lose at least 2 x this many seconds of work (accelerator-seconds since their checkpoints) per
    # accelerator of the job that reclaims, that job waits up to this long in the queue first (its capacity is
    # held for it once it starves), then they are stopped. A reclaim that destroys less goes at once. 0: off.
    preemption_cost_wait_seconds: float = Field(default=900.0, ge=0, le=86400)
    # Interactive shells (fairpod shell, salloc, srun --pty): a shell that saw no input or output this long is
    # ended, and none lasts longer than the maximum; a user may ask for less, never more.
    shell_idle_timeout_seconds: float = Field(default=3600.0, ge=10, le=7 * 86400)
    shell_max_seconds: float = Field(default=8 * 3600.0, ge=60, le=30 * 86400)
    # A job naming several instance types (in order of preference) starts on the first it fits now. Borrow: fitting
    # by borrowing counts (Kueue's whenCanBorrow: Borrow); TryNextInstanceType: a later type that fits within the
    # team's quota goes first, the first that borrows only if none does (Kueue's TryNextFlavor).
    fallback_when_can_borrow: Literal["Borrow", "TryNextInstanceType"] = "Borrow"
    # Consolidation (fairpod.governance.consolidation): move running borrowed jobs (checkpoint, requeue, restart on
    # another node) to free whole nodes for a waiting multi-node job whose type has enough free accelerators spread
    # over nodes, when the moved jobs lose less work than the waiting job gains. Off; WithinQuota: for a job within
    # its team's quota; AlsoBorrowing: for a job that borrows too.
    consolidation: Literal["Off", "WithinQuota", "AlsoBorrowing"] = "Off"
    # Rules 3 and 4 together (Kueue's "preempt from all ClusterQueues in cohort"): a job that fits its team's quota
    # once the team's lower-priority jobs stop takes lent capacity back and stops those jobs at once. Opt-in: on a
    # contended TaskRanking replay it more than doubled the preemptions (docs/policies.md, "Kueue's tests").
    reclaim_with_own_jobs: bool = False
    # Preempting to borrow by priority (Kueue's borrowWithinCohort, fairpod.governance.borrow_priority): a job that
    # must borrow may stop other teams' borrowed jobs of lower priority, only those at or below
    # preempt_to_borrow_max_priority (null: any lower priority). Never (the default): it borrows only what is idle.
    # Classic preemption only (idle_compute_allocation FirstComeFirstServe; under FairShare, fair share decides).
    preempt_to_borrow: Literal["Never", "LowerPriority"] = "Never"
    preempt_to_borrow_max_priority: int | None = Field(default=None, ge=-1_000_000, le=1_000_000)

    # Reclaim within the tree of groups (Kueue's hierarchical reclaim, fairpod.governance.hierarchical_reclaim): a job
    # that borrows but fits within the quota of one of its team's groups takes that group's quota back from teams
    # outside the group that borrow it. Opt-in: without it only a job within its team's quota reclaims.
    hierarchical_reclaim: bool = False

    @field_validator("preempt_to_borrow")
    @classmethod
    def _borrow_by_priority_is_classic(cls, v: str, info: ValidationInfo) -> str:
        alloc = info.data.get("idle_compute_allocation")
        if v != "Never" and alloc is not None and alloc != IdleComputeAllocation.FIRST_COME_FIRST_SERVE:
            raise ValueError(
                "LowerPriority needs idle_compute_allocation: FirstComeFirstServe (under "
                f"{IdleComputeAllocation(alloc).value} fair share decides which borrowed jobs stop; Kueue's "
                "borrowWithinCohort is for classic preemption only)")
        return v


class QuotaEntry(_Strict):
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


class Sharing(_Strict):
    strategy: SharingStrategy = SharingStrategy.LEND_AND_BORROW
    borrow_limit: int = Field(default=50, ge=1, le=500)
    # per instance type: the most of its idle quota the team lends (it keeps quota - limit for itself; Kueue's
    # lendingLimit), and the most it borrows in absolute terms, besides borrow_limit % (HyperPod's
    # AbsoluteBorrowLimits)
    lending_limits: list[LimitEntry] = Field(default_factory=list)
    absolute_borrow_limits: list[LimitEntry] = Field(default_factory=list)


class UserLimits(_Strict):
    """Per-user rules inside a team (Slurm's MaxTRESPerUser, KAI's per-user fairness)."""

    # the most accelerators one user's running jobs may hold at once; None: no cap
    max_running_accelerators: int | None = Field(default=None, ge=1, le=1_000_000)
    # FirstComeFirstServe: the team's queue order; RoundRobin: the next job comes from the user who runs the
    # fewest accelerators in the team now (ties: the earlier job), so users take turns
    queue_order: Literal["FirstComeFirstServe", "RoundRobin"] = "FirstComeFirstServe"


class Budget(_Strict):
    """A team's accelerator-hours per period on one instance type: past 80 % its jobs count as the lowest
    priority, past 100 % it may not borrow, and with ``hard_cap`` its jobs of that type wait for the next period."""

    instance_type: str
    period: Literal["day", "week", "month"]
    accelerator_hours: float = Field(gt=0, le=1e9)
    hard_cap: bool = False


class Group(_Strict):
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


class Team(_Strict):
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


class ClusterSpec(_Strict):
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


class SpecError(ValueError):
    """A spec with one or more problems; ``problems`` holds one message per problem, naming its field."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _fields_at(loc: tuple[Any, ...], model: Any = None) -> list[str]:
    """The field names of the spec's model at ``loc`` (a pydantic error's location), for a did-you-mean; [] when
    the location is no model."""
    import typing

    model = model or ClusterSpec
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        todo, model = [field.annotation], None
        while todo and model is None:  # list[Team], Policy | None, ...: the model inside
            t = todo.pop()
            if isinstance(t, type) and issubclass(t, BaseModel):
                model = t
            else:
                todo += list(typing.get_args(t))
        if model is None:
            return []
    return list(getattr(model, "model_fields", {}))


def _pydantic_problems(e: ValidationError) -> list[str]:
    probs = []
    for err in e.errors():
        msg = err["msg"]
        if err["type"] == "string_pattern_mismatch":
            msg = "must be lower-case letters, digits and '-', starting and ending with a letter or digit"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field" + did_you_mean(str(err["loc"][-1]), _fields_at(err["loc"][:-1]))
        where = _loc(err["loc"])
        if err["type"] == "value_error":  # our validators' own words: "Value error, FIELD: why" -> "LOC.FIELD: why"
            msg = msg.removeprefix("Value error, ")
            field, sep, why = msg.partition(": ")
            if sep and field.isidentifier():
                at_field = bool(err["loc"]) and err["loc"][-1] == field
                where, msg = (where if at_field else f"{where}.{field}" if err["loc"] else field), why
        probs.append(f"{where}: {msg}")
    return probs


def check_spec(spec: ClusterSpec) -> list[str]:
    """Cross-field checks that pydantic cannot express field by field."""
    probs: list[str] = []
    builtin_clash = [t.name for t in spec.instance_types if t.name in BUILTIN_INSTANCE_TYPES]
    for i, t in enumerate(spec.instance_types):
        if t.name in builtin_clash:
            probs.append(f"instance_types[{i}].name: {t.name!r} is a built-in instance type; pick another name")
    cat = spec.catalog()
    known = ", ".join(sorted(cat)[:6]) + ", …"
    for name, n in Counter(t.name for t in spec.instance_types).items():
        if n > 1:
            probs.append(f"instance_types: {name!r} is defined {n} times")
    for name, n in Counter(g.name for g in spec.cluster.instance_groups).items():
        if n > 1:
            probs.append(f"cluster.instance_groups: group name {name!r} is used {n} times")
    for i, g in enumerate(spec.cluster.instance_groups):
        if g.instance_type not in cat:
            probs.append(
                f"cluster.instance_groups[{i}].instance_type: unknown instance type {g.instance_type!r}{did_you_mean(g.instance_type, cat)} "
                f"(built-in: {known}; or define it under instance_types)"
            )
        probs.extend(_topology_problems(spec, i, g))
        if g.accelerator_partition_type and g.instance_type in cat:
            try:
                partitioned(cat[g.instance_type], g.accelerator_partition_type)
            except ValueError as e:
                probs.append(f"cluster.instance_groups[{i}].accelerator_partition_type: {e}")
            if g.accelerators_are == "gpus" and not _executor(spec).real_mig:
                probs.append(f"cluster.instance_groups[{i}].accelerator_partition_type: MIG partitions of real GPUs "
                             f"are not supported on {_executor(spec).name.capitalize()} yet")
        for j, check in enumerate(g.deep_health_checks):
            if check not in ("InstanceStress", "InstanceConnectivity"):
                probs.append(
                    f"cluster.instance_groups[{i}].deep_health_checks[{j}]: unknown check {check!r} "
                    "(InstanceStress, InstanceConnectivity)"
                )
    for name, n in Counter(spec.cluster.topology_levels).items():
        if n > 1:
            probs.append(f"cluster.topology_levels: {name!r} is listed {n} times")
    for j, name in enumerate(spec.cluster.topology_levels):
        if not re.fullmatch(NAME_PATTERN, name) or len(name) > 40:
            probs.append(f"cluster.topology_levels[{j}]: {name!r} must be lower-case letters, digits and '-'")
    for name, n in Counter(p.name for p in spec.policy.priority_classes).items():
        if n > 1:
            probs.append(f"policy.priority_classes: {name!r} is defined {n} times")
    for name, n in Counter(t.name for t in spec.teams).items():
        if n > 1:
            probs.append(f"teams: duplicate team {name!r}")
    for what in ("namespaces", "local_queues"):
        owner: dict[str, str] = {}
        for t in spec.teams:
            for n in getattr(t, what):
                if owner.setdefault(n, t.name) != t.name:
                    probs.append(f"teams: {what} {n!r} is listed by both {owner[n]} and {t.name}")
    probs += _group_problems(spec, cat, known)
    quota_sum: dict[str, Res] = {}
    for i, g in enumerate(spec.groups):
        probs += _quota_problems(f"groups[{i}]", f"group {g.name!r}", g.quota, cat, known, quota_sum)
    for i, team in enumerate(spec.teams):
        probs += _quota_problems(f"teams[{i}]", f"team {team.name!r}", team.quota, cat, known, quota_sum)
        probs += _limit_problems(i, team, cat, known)
        seen_b: set[str] = set()
        for j, b in enumerate(team.budgets):
            where = f"teams[{i}].budgets[{j}]"
            if b.instance_type not in cat:
                probs.append(f"{where}.instance_type: unknown instance type {b.instance_type!r}{did_you_mean(b.instance_type, cat)} "
                             f"(built-in: {known})")
            elif cat[b.instance_type].accelerators == 0:
                probs.append(f"{where}.instance_type: {b.instance_type} has no accelerators to count hours of")
            if b.instance_type in seen_b:
                probs.append(f"{where}.instance_type: team {team.name!r} has a budget for {b.instance_type} "
                             "already (one per instance type)")
            seen_b.add(b.instance_type)
    if not probs:
        cap = spec.capacity()
        for it, total in sorted(quota_sum.items()):
            if it in cap and not total.fits_in(cap[it]):
                c = cap[it]
                probs.append(
                    f"teams[*].quota: the quotas for {it} add up to {total.acc} accelerators / {total.vcpu:g} vCPU / "
                    f"{total.memory_gib:g} GiB, more than the cluster's {c.acc} / {c.vcpu:g} / {c.memory_gib:g}"
                )
    return probs


def _topology_problems(spec: ClusterSpec, i: int, g: InstanceGroup) -> list[str]:
    """An instance group's topology names known levels and valid domains, for its own nodes, and leaves no
    level open when the cluster has levels (every node is in one domain of each level)."""
    levels = spec.cluster.topology_levels
    where = f"cluster.instance_groups[{i}]"
    probs = []
    names = {f"{g.name}-{k}" for k in range(g.count)}
    for node in g.node_topology:
        if node not in names:
            probs.append(f"{where}.node_topology: {node!r} is not a node of group {g.name!r} "
                         f"({g.name}-0 … {g.name}-{max(0, g.count - 1)})")
    for field_name, labels in [("topology", g.topology)] + [(f"node_topology.{n}", t) for n, t in
                                                            g.node_topology.items()]:
        for level, value in labels.items():
            if level not in levels:
                probs.append(f"{where}.{field_name}.{level}: unknown topology level (cluster.topology_levels: "
                             f"{', '.join(levels) or 'none'})")
            elif not re.fullmatch(TOPOLOGY_VALUE, str(value)):
                probs.append(f"{where}.{field_name}.{level}: {value!r} must be letters, digits, '-', '_' or '.' "
                             "(at most 63)")
    if levels and not probs and not _executor(spec).nodes_from_executor:
        open_nodes = [n for n in sorted(names) if not all(
            (g.node_topology.get(n, {}) | g.topology).get(lv) for lv in levels)]
        if open_nodes:
            probs.append(f"{where}: node {open_nodes[0]} has no domain for every topology level ({', '.join(levels)});"
                         " give the group's topology or node_topology")
    return probs


def _group_problems(spec: ClusterSpec, cat: dict[str, InstanceType], known: str) -> list[str]:
    """The tree of groups: unique names apart from the teams', known parents, no cycle, known groups of teams."""
    probs: list[str] = []
    names = {g.name for g in spec.groups}
    teams = {t.name for t in spec.teams}
    for name, n in Counter(g.name for g in spec.groups).items():
        if n > 1:
            probs.append(f"groups: duplicate group {name!r}")
    for i, g in enumerate(spec.groups):
        if g.name in teams:
            probs.append(f"groups[{i}].name: {g.name!r} is a team's name too; give the group another name")
        if g.parent is not None and g.parent not in names:
            probs.append(f"groups[{i}].parent: unknown group {g.parent!r}")
        probs += _limit_problems(i, g, cat, known, "groups", "group")
    placed = {g.name for g in spec.groups_top_down()}
    cycle = sorted(g.name for g in spec.groups if g.name not in placed and (g.parent is None or g.parent in names))
    if cycle:
        probs.append(f"groups: {', '.join(cycle)} are their own ancestors (a parent cycle)")
    for i, t in enumerate(spec.teams):
        if t.group is not None and t.group not in names:
            probs.append(f"teams[{i}].group: unknown group {t.group!r}"
                         + (f" (groups: {', '.join(sorted(names))})" if names else " (the spec has no groups)"))
    return probs


def _quota_problems(prefix: str, owner: str, entries: list[QuotaEntry], cat: dict[str, InstanceType], known: str,
                    quota_sum: dict[str, Res]) -> list[str]:
    """A team's or a group's quota entries: known instance types, once each, one unit; their sum per type is added
    to ``quota_sum``."""
    probs: list[str] = []
    seen: set[str] = set()
    for j, q in enumerate(entries):
        where = f"{prefix}.quota[{j}]"
        if q.instance_type not in cat:
            probs.append(f"{where}.instance_type: unknown instance type {q.instance_type!r}"
                         f"{did_you_mean(q.instance_type, cat)} (built-in: {known})")
            continue
        if q.instance_type in seen:
            probs.append(f"{where}.instance_type: {q.instance_type!r} appears twice in {owner}")
        seen.add(q.instance_type)
        given = [k for k in ("accelerators", "vcpu", "memory_gib") if getattr(q, k) is not None]
        if q.count is not None and given:
            probs.append(f"{where}: give either count or {'/'.join(given)}, not both")
            continue
        if q.count is None and not given:
            probs.append(f"{where}: give count, accelerators, vcpu or memory_gib")
            continue
        try:
            r = q.resolve(cat[q.instance_type])
        except ValueError as e:
            probs.append(f"{where}: {e}")
            continue
        quota_sum[q.instance_type] = quota_sum.get(q.instance_type, ZERO) + r
    return probs


def _limit_problems(i: int, team: Team | Group, cat: dict[str, InstanceType], known: str, kind: str = "teams",
                    what: str = "team") -> list[str]:
    """Lending and absolute borrow limits: known instance types, once each, one unit, a strategy that uses them."""
    probs: list[str] = []
    strat = team.sharing.strategy
    for field, entries, needs in (("lending_limits", team.sharing.lending_limits, strat != SharingStrategy.DONT_LEND),
                                  ("absolute_borrow_limits", team.sharing.absolute_borrow_limits,
                                   strat == SharingStrategy.LEND_AND_BORROW)):
        if entries and not needs:
            probs.append(f"{kind}[{i}].sharing.{field}: {what} {team.name!r} has strategy {strat.value}, which "
                         f"{'does not lend' if field == 'lending_limits' else 'does not borrow'}")
            continue
        seen: set[str] = set()
        for j, e in enumerate(entries):
            where = f"{kind}[{i}].sharing.{field}[{j}]"
            if e.instance_type not in cat:
                probs.append(f"{where}.instance_type: unknown instance type {e.instance_type!r}{did_you_mean(e.instance_type, cat)} "
                             f"(built-in: {known})")
                continue
            if e.instance_type in seen:
                probs.append(f"{where}.instance_type: {e.instance_type!r} appears twice")
            seen.add(e.instance_type)
            given = [k for k in ("accelerators", "vcpu", "memory_gib") if getattr(e, k) is not None]
            if (e.count is not None) == bool(given) or len(given) > 1:
                probs.append(f"{where}: give exactly one of count, accelerators, vcpu or memory_gib")
                continue
            try:
                e.resolve(cat[e.instance_type])
            except ValueError as err:
                probs.append(f"{where}: {err}")
    return probs


def parse_spec(data: Any) -> ClusterSpec:
    """Validate a spec given as a dict; raise SpecError listing every problem."""
    if not isinstance(data, dict):
        raise SpecError(["(top level): the spec must be a mapping with cluster, policy, teams …"])
    try:
        spec = ClusterSpec.model_validate(data)
    except ValidationError as e:
        raise SpecError(_pydantic_problems(e)) from None
    probs = check_spec(spec)
    if probs:
        raise SpecError(probs)
    return spec


def load_spec(path: str | Path) -> ClusterSpec:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise SpecError([f"{p}: cannot read: {e.strerror}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError([f"{p}: not valid YAML: {e}"]) from None
    return parse_spec(data)


def seed_spec() -> ClusterSpec:
    """The demo cluster of the seed post: 4 x ml.g5.12xlarge, teams john and smith."""
    return parse_spec(
        {
            "cluster": {"name": "demo", "instance_groups": [
                {"name": "workers", "instance_type": "ml.g5.12xlarge", "count": 4}]},
            "policy": {
                "task_prioritization": "TaskRanking",
                "priority_classes": [{"name": "inference", "weight": 100}, {"name": "training", "weight": 50}],
                "idle_compute_allocation": "FairShare",
            },
            "teams": [
                {"name": "john", "fair_share_weight": 0,
                 "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 50},
                 "quota": [{"instance_type": "ml.g5.12xlarge", "count": 3}]},
                {"name": "smith", "fair_share_weight": 100,
                 "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 100},
                 "quota": [{"instance_type": "ml.g5.12xlarge", "count": 1}]},
            ],
        }
    )


def _executor(spec: ClusterSpec) -> Any:
    """The spec's executor (``fairpod.executors.registry.ExecutorKind``)."""
    from fairpod.executors import registry  # a leaf module: the names only

    return registry.get(spec.cluster.executor.kind)
