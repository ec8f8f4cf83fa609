"""Build an engine snapshot from a cluster spec (nodes named ``<group>-<i>``)."""

from __future__ import annotations

from fairpod.governance.budget import Meter
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Group, Team
from fairpod.model.resources import node_res
from fairpod.model.spec import (
    ClusterSpec,
    IdleComputeAllocation,
    PreemptTeamTasks,
    SharingStrategy,
    TaskPrioritization,
    Toggle,
)


def empty_snapshot(spec: ClusterSpec, now: float = 0.0) -> Snapshot:
    """A snapshot with the spec's policy and tree of groups, and no nodes or teams yet."""
    snap = _policy_snapshot(spec, now)
    for g in spec.groups_top_down():
        strat = g.sharing.strategy
        snap.add_group(Group(
            name=g.name, parent=g.parent, weight=g.fair_share_weight,
            lends=strat in (SharingStrategy.LEND_AND_BORROW, SharingStrategy.LEND),
            borrows=strat == SharingStrategy.LEND_AND_BORROW, borrow_limit=g.sharing.borrow_limit,
            lend_limit=spec.team_limits(g.sharing.lending_limits),
            borrow_abs=spec.team_limits(g.sharing.absolute_borrow_limits), quota=spec.group_quota(g),
        ))
    return snap


def _policy_snapshot(spec: ClusterSpec, now: float) -> Snapshot:
    p = spec.policy
    return Snapshot(
        task_ranking=p.task_prioritization == TaskPrioritization.TASK_RANKING,
        fair_share=IdleComputeAllocation(p.idle_compute_allocation).fair_share,
        history_half_life=p.fair_share_half_life_seconds
        if p.idle_compute_allocation == IdleComputeAllocation.FAIR_SHARE_HISTORY else None,
        idle_sharing=p.idle_resource_sharing == Toggle.ENABLED,
        starvation_guard=p.starvation_guard_seconds,
        borrow_limit_while_others_wait=p.borrow_limit_applies == "WhileOthersWait",
        fallback_borrows=p.fallback_when_can_borrow == "Borrow",
        checkpoint_wait=p.preemption_checkpoint_wait_seconds,
        preempt_min_wait=p.preemption_min_wait_seconds,
        cost_wait=p.preemption_cost_wait_seconds,
        consolidation=p.consolidation,
        reclaim_with_own=p.reclaim_with_own_jobs,
        borrow_preempt=p.preempt_to_borrow == "LowerPriority",
        borrow_preempt_max=p.preempt_to_borrow_max_priority,
        hierarchical_reclaim=p.hierarchical_reclaim,
        fallback_preempts=p.fallback_when_can_borrow == "PreemptionOverBorrowing",
        aging=(p.priority_aging_per_hour, p.priority_aging_max),
        now=now,
        topology_levels=tuple(spec.cluster.topology_levels),
    )


def engine_team(spec: ClusterSpec, name: str) -> Team:
    t = spec.team(name)
    assert t is not None
    strat = t.sharing.strategy
    return Team(
        name=t.name,
        weight=t.fair_share_weight,
        lends=strat in (SharingStrategy.LEND_AND_BORROW, SharingStrategy.LEND),
        borrows=strat == SharingStrategy.LEND_AND_BORROW,
        borrow_limit=t.sharing.borrow_limit,
        preempt_lower=t.preempt_team_tasks != PreemptTeamTasks.NEVER,
        preempt_newer=t.preempt_team_tasks == PreemptTeamTasks.LOWER_OR_NEWER_EQUAL,
        quota=spec.team_quota(t),
        lend_limit=spec.team_limits(t.sharing.lending_limits),
        borrow_abs=spec.team_limits(t.sharing.absolute_borrow_limits),
        user_cap=t.user_limits.max_running_accelerators,
        round_robin=t.user_limits.queue_order == "RoundRobin",
        budget={b.instance_type: (0.0, b.accelerator_hours, b.hard_cap) for b in t.budgets},
        path=_path(spec, t.group),
    )


def _path(spec: ClusterSpec, group: str | None) -> tuple[str, ...]:
    out: list[str] = []
    while group is not None and group not in out:
        out.append(group)
        g = spec.group(group)
        group = g.parent if g is not None else None
    return tuple(out)


def budget_meter(spec: ClusterSpec) -> Meter:
    """A meter for the spec's team budgets (``governance.budget``)."""
    return Meter({(t.name, b.instance_type): (b.period, b.accelerator_hours, b.hard_cap)
                  for t in spec.teams for b in t.budgets})


def snapshot_from_spec(spec: ClusterSpec, now: float = 0.0, *, passed: bool = True) -> Snapshot:
    """A snapshot with every node of the spec schedulable and idle, every team with an empty queue."""
    snap = empty_snapshot(spec, now)
    cat = spec.catalog()
    for g in spec.cluster.instance_groups:
        cap = node_res(cat[g.node_type])
        for i in range(g.count):
            name = f"{g.name}-{i}"
            snap.add_node(name, g.node_type, cap, passed=passed, topology=spec.node_topology(g.name, name))
    for t in spec.teams:
        snap.add_team(engine_team(spec, t.name))
    return snap
