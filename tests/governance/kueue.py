"""Kueue's own scheduler and preemption tests as fairpod engine tests: the translation's builders.

The cases are read from kubernetes-sigs/kueue at commit ``KUEUE_COMMIT`` (``pkg/scheduler/preemption/
preemption_test.go``, ``preemption_fair_test.go``, ``pkg/scheduler/scheduler_test.go``); each test names the Kueue test
it translates. The translation, the same for every case:

- a ClusterQueue is a team, a cohort is the cluster (a ClusterQueue without a cohort: a cluster of its own);
- the one resource a case counts (cpu) is accelerators, on nodes of one accelerator each, as many as the cohort's
  nominal quotas together: a job of N cpu is N replicas of one accelerator, so placement never decides (Kueue's
  preemption tests count quota only). ``scale`` multiplies every amount (cases with half a cpu);
- ``nominalQuota`` is the team's quota; ``borrowingLimit`` B its absolute borrow limit (the percent limit at its
  largest, 500 %, so that B binds); none: 500 %, more than any cohort here can lend; ``lendingLimit`` its lending limit;
- ``withinClusterQueue: LowerPriority`` is ``preempt_team_tasks: LowerPriority`` under TaskRanking (``Never``:
  ``Never``); a workload's priority is the job's; Kueue's classic preemption (no fair sharing) is
  ``idle_compute_allocation: FirstComeFirstServe`` (a borrower never preempts to borrow), fair sharing is ``FairShare``
  with each ClusterQueue's weight (default 1);
- the admitted workloads run since ``START`` with nothing lost yet; Kueue breaks ties between equal victims by UID (the
  first name), fairpod by the later submitted: the workloads are submitted in reverse order so that both name the
  same job; the incoming workload waited ``WAITED`` seconds (fair share stops only jobs that lose less than 1/100 of
  that: here they lose nothing);
- reclaims that would destroy much work do not wait (``preemption_cost_wait_seconds: 0``: Kueue has no such rule);
- a team reclaims and stops its own lower-priority jobs together (``policy.reclaim_with_own_jobs: true``, opt-in).
"""

from __future__ import annotations

from typing import Any

from fairpod.governance import Snapshot, Workload, schedule
from fairpod.governance.build import snapshot_from_spec
from fairpod.governance.decisions import Admit, Preempt, Wait
from fairpod.model.resources import Res
from fairpod.model.spec import parse_spec

KUEUE_COMMIT = "ff69552e79ad21652c36caa97038382e55625cf7"  # kubernetes-sigs/kueue, 2026-08-22
KT = "k1"  # one accelerator a node
START = 1000.0
WAITED = 60.0
_SCALE: dict[int, int] = {}


def team(cq: str) -> str:
    """A ClusterQueue's name as a team's (lower case, '-' for '_': ``a_standard`` is ``a-standard``)."""
    return cq.replace("_", "-").lower()


def cohort(queues: dict[str, dict[str, Any]], *, fair: bool = False, scale: int = 1,
           policy: dict[str, Any] | None = None) -> Snapshot:
    """One cohort: ``queues`` maps a ClusterQueue's name to ``quota`` (nominal), ``borrow`` (borrowingLimit; absent:
    none), ``lend`` (lendingLimit), ``within`` (``LowerPriority`` default, or ``Never``), ``weight`` (fair sharing,
    default 1). ``policy``: more policy fields (``borrowWithinCohort`` is ``preempt_to_borrow``)."""
    nodes = sum(q["quota"] for q in queues.values()) * scale
    teams = []
    for name, q in queues.items():
        sharing: dict[str, Any] = {"strategy": "LendAndBorrow", "borrow_limit": 500}
        if q.get("borrow") is not None:
            sharing["absolute_borrow_limits"] = [{"instance_type": KT, "accelerators": q["borrow"] * scale}]
        if q.get("lend") is not None:
            sharing["lending_limits"] = [{"instance_type": KT, "accelerators": q["lend"] * scale}]
        teams.append({"name": team(name), "fair_share_weight": q.get("weight", 1),
                      "preempt_team_tasks": q.get("within", "LowerPriority"), "sharing": sharing,
                      "quota": [{"instance_type": KT, "accelerators": q["quota"] * scale}] if q["quota"] else []})
    spec = parse_spec({
        "cluster": {"name": "cohort", "instance_groups": [{"name": "n", "instance_type": KT, "count": nodes}]},
        "instance_types": [{"name": KT, "accelerators": 1, "vcpu": 4, "memory_gib": 16}],
        "policy": {"task_prioritization": "TaskRanking", "preemption_cost_wait_seconds": 0,
                   "reclaim_with_own_jobs": True,
                   "idle_compute_allocation": "FairShare" if fair else "FirstComeFirstServe", **(policy or {})},
        "teams": teams,
    })
    snap = snapshot_from_spec(spec)
    snap.now = START
    _SCALE[id(snap)] = scale  # (the native build's Snapshot takes no attributes of ours)
    return snap


def admitted(snap: Snapshot, *jobs: tuple[str, str, float] | tuple[str, str, float, int]) -> None:
    """Kueue's admitted workloads, each ``(name, cluster queue, cpu[, priority])``, running on free nodes."""
    scale = _SCALE[id(snap)]
    for job in reversed(jobs):  # the first listed is submitted last: the tie-break of both (module docstring)
        name, cq, cpu = str(job[0]), str(job[1]), float(job[2])
        prio = job[3] if len(job) > 3 else 0  # type: ignore[misc]
        n = round(cpu * scale)
        w = Workload(name, team(cq), KT, n, Res(1, 4000, 16384), priority=int(prio), submit=0.0)
        snap.add_pending(w)
        free = sorted(nn for nn, nd in snap.nodes.items() if nd.free[0] >= 1)[:n]
        assert len(free) == n, f"{name}: the cohort has no room for it"
        snap.start(w, free, START)


def incoming(snap: Snapshot, cq: str, cpu: float, prio: int = 0, name: str = "in"
             ) -> tuple[list[str] | None, list[Preempt], str]:
    """The incoming workload: submit it and run one cycle. (sorted victims if it was admitted, else None; the
    preemptions; its admission or wait reason)."""
    n = round(cpu * _SCALE[id(snap)])
    snap.add_pending(Workload(name, team(cq), KT, n, Res(1, 4000, 16384), priority=prio, submit=START - WAITED))
    ds = schedule(snap)
    pre = [d for d in ds if isinstance(d, Preempt)]
    adm = [d for d in ds if isinstance(d, Admit) and d.job == name]
    why = adm[0].reason if adm else next((d.reason for d in ds if isinstance(d, Wait) and d.job == name), "")
    return (sorted(p.job for p in pre) if adm else None), pre, why


def victims(snap: Snapshot, cq: str, cpu: float, prio: int = 0) -> list[str] | None:
    """The incoming workload's victims (sorted), [] if it started without any, None if it waits."""
    return incoming(snap, cq, cpu, prio)[0]


def tree(cohorts: dict[str, tuple[str | None, int]], queues: dict[str, dict[str, Any]], *,
         policy: dict[str, Any] | None = None) -> Snapshot:
    """Kueue's hierarchical cohorts (preemption_hierarchical_test.go): ``cohorts`` maps a Cohort's name to (its
    parent, its own cpu quota), the root's parent None; ``queues`` a ClusterQueue's name to ``cohort``, ``quota``,
    ``lend`` (lendingLimit), ``within``. Translated as ``fairpod import kueue`` reads such objects: the root Cohort
    is the cluster (its own quota is capacity no team holds, lent with idle resource sharing), every other Cohort a
    group (``groups[].quota`` its own quota, borrowing without a percent limit that binds: 500 %), a ClusterQueue
    a team of its Cohort's group, a ClusterQueue with quota 0 and no borrowingLimit borrowing up to the whole
    cluster (an absolute borrow limit); classic preemption (FirstComeFirstServe)."""
    root = next(name for name, (parent, _) in cohorts.items() if parent is None)
    nodes = sum(q for _, q in cohorts.values()) + sum(q["quota"] for q in queues.values())
    below = {name: 0 for name in cohorts}  # each Cohort's subtree quota
    for _, (parent, quota) in [*cohorts.items(), *((n, (q["cohort"], q["quota"])) for n, q in queues.items())]:
        while parent is not None:
            below[parent] += quota
            parent = cohorts[parent][0]
    for name, (_, quota) in cohorts.items():
        below[name] += quota
    groups = [{"name": team(name), **({"parent": team(parent)} if parent != root else {}),
               "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 500, **(
                   {} if below[name] else {"absolute_borrow_limits": [{"instance_type": KT, "accelerators": nodes}]})},
               **({"quota": [{"instance_type": KT, "accelerators": quota}]} if quota else {})}
              for name, (parent, quota) in cohorts.items() if name != root]
    teams = []
    for name, q in queues.items():
        sharing: dict[str, Any] = {"strategy": "LendAndBorrow", "borrow_limit": 500}
        if not q["quota"]:
            sharing["absolute_borrow_limits"] = [{"instance_type": KT, "accelerators": nodes}]
        if q.get("lend") is not None:
            sharing["lending_limits"] = [{"instance_type": KT, "accelerators": q["lend"]}]
        teams.append({"name": team(name), "preempt_team_tasks": q.get("within", "LowerPriority"), "sharing": sharing,
                      **({"group": team(q["cohort"])} if q["cohort"] != root else {}),
                      "quota": [{"instance_type": KT, "accelerators": q["quota"]}] if q["quota"] else []})
    spec = parse_spec({
        "cluster": {"name": "cohort", "instance_groups": [{"name": "n", "instance_type": KT, "count": nodes}]},
        "instance_types": [{"name": KT, "accelerators": 1, "vcpu": 4, "memory_gib": 16}],
        "policy": {"task_prioritization": "TaskRanking", "preemption_cost_wait_seconds": 0,
                   "reclaim_with_own_jobs": True, "idle_compute_allocation": "FirstComeFirstServe", "hierarchical_reclaim": True,
                   "idle_resource_sharing": "Enabled" if cohorts[root][1] else "Disabled", **(policy or {})},
        **({"groups": groups} if groups else {}),
        "teams": teams,
    })
    snap = snapshot_from_spec(spec)
    snap.now = START
    _SCALE[id(snap)] = 1
    return snap
