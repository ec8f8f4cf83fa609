"""The cluster policy of the spec: task prioritization, priority classes (their weights and runtime limits),
idle compute allocation, preemption, backoff, reservation and the other cluster-wide rules (docs/policies.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from fairpod.model.fields import NAME_PATTERN, IdleComputeAllocation, Strict, TaskPrioritization, Toggle
from fairpod.model.logrules import LogRule


class PriorityClass(Strict):
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


class Policy(Strict):
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
    # A space (docs/spaces.md) with no request through its proxy this long is stopped (its files stay); a space's
    # own idle_minutes wins; null: never.
    space_idle_minutes: float | None = Field(default=None, gt=0, le=7 * 24 * 60)
    # An elastic job that shrank must show life again (a progress report, else output) within this many seconds,
    # or it is hung (its replicas did not re-form their group: e.g. a torchrun rendezvous still waiting for the
    # replica that left); the job's hang_action says what follows (fairpod.server.core.transitions.watchdog). null: never.
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
    # team's quota goes first, the first that borrows only if none does (Kueue's TryNextFlavor);
    # PreemptionOverBorrowing: as TryNextInstanceType, and before borrowing, a type where the job runs within quota
    # once some jobs are preempted (Kueue's flavorFungibility.preference; fairpod.governance.fungibility).
    fallback_when_can_borrow: Literal["Borrow", "TryNextInstanceType", "PreemptionOverBorrowing"] = "Borrow"
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
    # Priority aging (fairpod.governance.aging; KAI's aging, Kueue's priority boost): under TaskRanking a waiting job's
    # place in its team's queue counts its priority plus per_hour points per hour waited, at most max points. 0: off.
    priority_aging_per_hour: float = Field(default=0.0, ge=0, le=1000)
    priority_aging_max: int = Field(default=0, ge=0, le=1000)

    @field_validator("priority_aging_per_hour")
    @classmethod
    def _aging_ranks(cls, v: float, info: ValidationInfo) -> float:
        if v > 0 and info.data.get("task_prioritization") == TaskPrioritization.FIRST_COME_FIRST_SERVE:
            raise ValueError("needs task_prioritization: TaskRanking (under FirstComeFirstServe the queue is by "
                             "arrival alone, so there is no priority to raise)")
        return v

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
