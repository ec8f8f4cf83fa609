"""``fairpod export kueue``: a cluster spec as the Kueue objects that enforce the same policy on Kubernetes.

* a ResourceFlavor per instance type (node label ``node.kubernetes.io/instance-type``); with topology levels, a
  Topology (``fairpod.dev/topology-<level>`` node labels, then ``kubernetes.io/hostname``) that every flavor
  names, so that Kueue's topology-aware scheduling reads the podset topology annotations as fairpod reads
  ``required_topology`` / ``preferred_topology``;
* one Cohort, named after the cluster: every team's ClusterQueue is in it, so idle quota can be lent; with
  ``groups``, a Cohort per group (its name), ``parentName`` its parent group or the cluster's Cohort, so the tree
  is Kueue's hierarchical cohorts: ``fairSharing.weight`` the group's weight, and per flavor ``nominalQuota`` the
  group's own quota (0 without one: the rest is its ClusterQueues'), ``borrowingLimit`` = the subtree's quota
  (its own and its teams' and groups') x borrow limit % (0 for Lend and
  DontLend), ``lendingLimit`` its lending limit (0 for DontLend); a team's ClusterQueue is in its group's Cohort;
* a ClusterQueue per team: ``nominalQuota`` per flavor for the accelerators (``nvidia.com/gpu``, Neuron devices
  for Trainium), ``cpu`` and ``memory``, exactly the quota fairpod resolves (millicores, MiB);
  ``borrowingLimit`` = quota x borrow limit % as fairpod rounds it, at most the team's absolute borrow limit
  (none for Lend and DontLend), for a type the team has no quota of but an absolute borrow limit, ``nominalQuota`` 0
  with that ``borrowingLimit``; ``lendingLimit`` = the team's lending limit (``0`` for DontLend); ``preemption``: ``reclaimWithinCohort: Any`` (a team always gets its quota
  back from borrowers), ``borrowWithinCohort`` = ``policy.preempt_to_borrow`` (``Never`` by default: borrowing
  preempts only by fair share; ``LowerPriority`` with ``maxPriorityThreshold`` = preempt_to_borrow_max_priority),
  ``withinClusterQueue: LowerPriority`` when the team preempts its own lower-priority tasks under TaskRanking;
  ``fairSharing.weight`` = the fair-share weight (0 = borrows last, gives back first, as in fairpod);
* a LocalQueue per team, ``hyperpod-ns-<team>-localqueue`` in namespace ``hyperpod-ns-<team>`` (and the
  Namespace itself);
* a WorkloadPriorityClass ``<class>-priority`` per priority class, value = weight (all 0 under
  FirstComeFirstServe, which ignores priority: Kueue would order by it);
* with idle resource sharing, a ClusterQueue ``fairpod-unallocated`` holding the capacity no team has as quota,
  selecting no namespace: it only lends.

What Kueue cannot express is listed by ``Export.notes`` (stderr) and written as comments in the files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fairpod.formats.kube import kueue as K
from fairpod.model.catalog import BUILTIN_INSTANCE_TYPES, InstanceType
from fairpod.model.resources import ZERO, Res
from fairpod.model.spec import (
    ClusterSpec,
    Group,
    IdleComputeAllocation,
    PreemptTeamTasks,
    SharingStrategy,
    TaskPrioritization,
    Team,
    Toggle,
)

FILES = {  # file name -> kinds, in the order kubectl apply -f DIR reads them
    "00-namespaces.yaml": ("Namespace",),
    "10-resourceflavors.yaml": ("Topology", "ResourceFlavor"),
    "20-cohort.yaml": ("Cohort",),
    "30-clusterqueues.yaml": ("ClusterQueue",),
    "40-localqueues.yaml": ("LocalQueue",),
    "50-workloadpriorityclasses.yaml": ("WorkloadPriorityClass",),
}


class ExportError(ValueError):
    """A spec that cannot be written as Kueue objects; the message names the field."""


@dataclass
class Export:
    objects: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)  # rules Kueue cannot express (stderr and comments)
    comments: dict[str, list[str]] = field(default_factory=dict)  # file name -> comment lines


def _dump(obj: Any) -> str:
    return json.dumps(obj, sort_keys=False, separators=(",", ":"))


def flavor_names(spec: ClusterSpec) -> dict[str, str]:
    """Instance type -> ResourceFlavor name, for every custom type and every type the spec uses."""
    used = [t.name for t in spec.instance_types]
    used += [g.instance_type for g in spec.cluster.instance_groups]
    used += [q.instance_type for t in spec.teams for q in t.quota]
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in dict.fromkeys(used):
        if not K.LABEL_VALUE.match(name):
            raise ExportError(f"instance type {name!r} cannot be a Kubernetes label value (letters, digits, '-', "
                              "'_', '.', starting and ending with a letter or digit)")
        base = name.lower().replace("_", "-")
        base = ".".join(p.strip("-") or "x" for p in base.split("."))
        flavor, i = base, 2
        while flavor in taken:
            flavor, i = f"{base}-{i}", i + 1
        taken.add(flavor)
        out[name] = flavor
    return out


def _resources(itype: InstanceType, covered: list[str], q: Res) -> dict[str, Any]:
    accel = K.accel_resource(itype.accelerator_kind)
    vals: dict[str, Any] = {r: 0 for r in covered}
    vals[accel] = q.acc
    vals[K.CPU] = K.cpu_qty(q.mcpu)
    vals[K.MEMORY] = K.mem_qty(q.mib)
    return vals


def _flavor(name: str, itype: InstanceType, covered: list[str], nominal: Res, borrow: Res | None,
            lend: Res | None) -> dict[str, Any]:
    n = _resources(itype, covered, nominal)
    b = _resources(itype, covered, borrow) if borrow is not None else None
    ln = _resources(itype, covered, lend) if lend is not None else None
    res = []
    for r in covered:
        entry: dict[str, Any] = {"name": r, "nominalQuota": n[r]}
        if b is not None:
            entry["borrowingLimit"] = b[r]
        if ln is not None:
            entry["lendingLimit"] = ln[r]
        res.append(entry)
    return {"name": name, "resources": res}


def borrowing_limit(q: Res, borrow_limit: int) -> Res:
    """What a LendAndBorrow team may borrow above quota ``q``: quota x (100 + limit) // 100 - quota, per
    resource, as fairpod's engine rounds it."""
    k = 100 + borrow_limit
    return Res(q.acc * k // 100 - q.acc, q.mcpu * k // 100 - q.mcpu, q.mib * k // 100 - q.mib)


def namespaces(team: Team) -> list[str]:
    """The namespaces of a team's jobs: those its spec entry lists, else HyperPod's."""
    return team.namespaces or [K.namespace(team.name)]


def _selector(names: list[str]) -> dict[str, Any]:
    if len(names) == 1:
        return {"matchLabels": {K.NS_LABEL: names[0]}}
    return {"matchExpressions": [{"key": K.NS_LABEL, "operator": "In", "values": names}]}


def _cluster_queue(spec: ClusterSpec, team: Team, flavors: dict[str, str], covered: list[str]) -> dict[str, Any]:
    cat = spec.catalog()
    strat = team.sharing.strategy
    groups = []
    lend_limits = spec.team_limits(team.sharing.lending_limits)
    abs_limits = spec.team_limits(team.sharing.absolute_borrow_limits)
    quota = spec.team_quota(team)
    # a type it only borrows (no quota, an absolute borrow limit): nominalQuota 0 with that borrowingLimit
    only_borrows = [it for it in abs_limits if it not in quota and strat == SharingStrategy.LEND_AND_BORROW]
    for it in [*(q.instance_type for q in team.quota), *only_borrows]:
        itype = cat[it]
        nominal = quota.get(it, ZERO)
        borrow = borrowing_limit(nominal, team.sharing.borrow_limit) if strat == SharingStrategy.LEND_AND_BORROW \
            else ZERO
        if it in abs_limits and strat == SharingStrategy.LEND_AND_BORROW:
            a = abs_limits[it]
            borrow = a if nominal == ZERO else Res(min(borrow.acc, a.acc), min(borrow.mcpu, a.mcpu),
                                                   min(borrow.mib, a.mib))
        lend = ZERO if strat == SharingStrategy.DONT_LEND else lend_limits.get(it)
        groups.append(_flavor(flavors[it], itype, covered, nominal, borrow, lend))
    ranking = spec.policy.task_prioritization == TaskPrioritization.TASK_RANKING
    own = ranking and team.preempt_team_tasks != PreemptTeamTasks.NEVER
    cq: dict[str, Any] = {
        "apiVersion": K.API, "kind": "ClusterQueue",
        "metadata": {"name": K.cluster_queue(team.name), "labels": {K.ANN_TEAM: team.name},
                     "annotations": {K.ANN_TEAM: _dump(team.model_dump(mode="json"))}},
        "spec": {
            "cohortName": team.group or spec.cluster.name,
            "namespaceSelector": _selector(namespaces(team)),
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"reclaimWithinCohort": "Any", "borrowWithinCohort": _borrow_within_cohort(spec),
                           "withinClusterQueue": str(team.preempt_team_tasks.value) if own else "Never"},
            "fairSharing": {"weight": team.fair_share_weight},
        },
    }  # fmt: skip
    if groups:
        cq["spec"]["resourceGroups"] = [{"coveredResources": covered, "flavors": groups}]
    fallback = spec.policy.fallback_when_can_borrow  # Borrow: Kueue's default (MayStopSearch), written as nothing
    if fallback != "Borrow":
        cq["spec"]["flavorFungibility"] = {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor", **(
            {"preference": "PreemptionOverBorrowing"} if fallback == "PreemptionOverBorrowing" else {})}
    return cq


def _borrow_within_cohort(spec: ClusterSpec) -> dict[str, Any]:
    """policy.preempt_to_borrow as Kueue's borrowWithinCohort (the same on every ClusterQueue)."""
    p = spec.policy
    if p.preempt_to_borrow == "Never":
        return {"policy": "Never"}
    out: dict[str, Any] = {"policy": "LowerPriority"}
    if p.preempt_to_borrow_max_priority is not None:
        out["maxPriorityThreshold"] = p.preempt_to_borrow_max_priority
    return out


def _subtree_quota(spec: ClusterSpec, group: str) -> dict[str, Res]:
    below = {group}
    for g in spec.groups_top_down():
        if g.parent in below:
            below.add(g.name)
    out: dict[str, Res] = {}
    for t in spec.teams:
        if t.group in below:
            for it, q in spec.team_quota(t).items():
                out[it] = out.get(it, ZERO) + q
    for g in spec.groups:  # and the groups' own quota
        if g.name in below:
            for it, q in spec.group_quota(g).items():
                out[it] = out.get(it, ZERO) + q
    return out


def _group_cohort(spec: ClusterSpec, g: Group, flavors: dict[str, str], covered: list[str]) -> dict[str, Any]:
    """A group as a Cohort of the tree: its parent, weight, and per flavor the limits of its whole subtree."""
    cat = spec.catalog()
    strat = g.sharing.strategy
    lend_limits = spec.team_limits(g.sharing.lending_limits)
    abs_limits = spec.team_limits(g.sharing.absolute_borrow_limits)
    quota = _subtree_quota(spec, g.name)
    own = spec.group_quota(g)
    fl = []
    for it in flavors:
        if it not in quota:
            continue
        borrow = borrowing_limit(quota[it], g.sharing.borrow_limit) if strat == SharingStrategy.LEND_AND_BORROW \
            else ZERO
        if it in abs_limits and strat == SharingStrategy.LEND_AND_BORROW:
            a = abs_limits[it]
            borrow = Res(min(borrow.acc, a.acc), min(borrow.mcpu, a.mcpu), min(borrow.mib, a.mib))
        lend = ZERO if strat == SharingStrategy.DONT_LEND else lend_limits.get(it)
        fl.append(_flavor(flavors[it], cat[it], covered, own.get(it, ZERO), borrow, lend))
    obj: dict[str, Any] = {
        "apiVersion": K.API, "kind": "Cohort",
        "metadata": {"name": g.name, "annotations": {K.ANN_GROUP: _dump(g.model_dump(mode="json"))}},
        "spec": {"parentName": g.parent or spec.cluster.name, "fairSharing": {"weight": g.fair_share_weight}},
    }  # fmt: skip
    if fl:
        obj["spec"]["resourceGroups"] = [{"coveredResources": covered, "flavors": fl}]
    return obj


def _unallocated(spec: ClusterSpec, flavors: dict[str, str], covered: list[str]) -> dict[str, Any] | None:
    cat = spec.catalog()
    left: dict[str, Res] = {}
    for it, cap in spec.capacity().items():
        used = ZERO
        for t in spec.teams:
            used = used + spec.team_quota(t).get(it, ZERO)
        for g in spec.groups:
            used = used + spec.group_quota(g).get(it, ZERO)
        rest = (cap - used).clip0()
        if rest != ZERO:
            left[it] = rest
    if not left:
        return None
    groups = [_flavor(flavors[it], cat[it], covered, left[it], ZERO, None) for it in flavors if it in left]
    return {
        "apiVersion": K.API, "kind": "ClusterQueue",
        "metadata": {"name": K.UNALLOCATED, "labels": {K.ROLE_LABEL: "unallocated"}},
        "spec": {"cohortName": spec.cluster.name, "queueingStrategy": "BestEffortFIFO",
                 "resourceGroups": [{"coveredResources": covered, "flavors": groups}]},
    }  # fmt: skip


def unexpressible(spec: ClusterSpec) -> list[str]:
    """fairpod's rules that no Kueue object can hold, one line each."""
    p = spec.policy
    notes = [
        "victim order: among the jobs a preemption may stop, fairpod stops first the one that loses the least "
        "work since its last reported checkpoint; Kueue knows nothing of checkpoints and stops the lowest "
        "priority, then the most recently admitted",
        f"min runtime: fairpod never preempts a job during its min_runtime_seconds (at most "
        f"{p.max_min_runtime_seconds:g} s, policy.max_min_runtime_seconds); Kueue has no minimum runtime",
    ]
    if p.starvation_guard_seconds > 0:
        notes.append(f"starvation guard: fairpod holds nodes for a job that fits its quota but has waited "
                     f"{p.starvation_guard_seconds:g} s; Kueue's BestEffortFIFO lets smaller workloads pass it "
                     "for as long as they fit")
    if p.preemption_cost_wait_seconds > 0:
        notes.append(f"costly reclaim: a reclaim whose victims would lose at least "
                     f"{2 * p.preemption_cost_wait_seconds:g} s of work per accelerator taken back waits up to "
                     f"{p.preemption_cost_wait_seconds:g} s for room to free by itself "
                     "(policy.preemption_cost_wait_seconds); Kueue reclaims at once")
    if not p.reclaim_with_own_jobs and p.task_prioritization == TaskPrioritization.TASK_RANKING and any(
            t.preempt_team_tasks != PreemptTeamTasks.NEVER for t in spec.teams):
        notes.append("reclaim with own jobs: Kueue stops a ClusterQueue's lower-priority workloads and reclaims its "
                     "lent quota in one preemption; fairpod does both at once only with policy.reclaim_with_own_jobs "
                     "(off: the job waits for idle capacity to borrow)")
    if spec.groups and p.idle_compute_allocation != IdleComputeAllocation.FIRST_COME_FIRST_SERVE:
        notes.append("fair sharing in the tree: fairpod admits a job within its team's quota first whatever its "
                     "group borrows, and ranks borrowers by their shares after each one's admission from the top of "
                     "the tree; Kueue's nominal-first ordering and tournament may admit another first "
                     "(docs/policies.md, D7 and D8)")
    if spec.groups and not p.hierarchical_reclaim:
        notes.append("hierarchical reclaim: Kueue takes a Cohort's quota back for its ClusterQueues from borrowers "
                     "outside it; fairpod does so only with policy.hierarchical_reclaim (off: only a job within its "
                     "team's quota reclaims)")
    if p.borrow_limit_applies == "WhileOthersWait":
        notes.append("borrow limits: fairpod lifts a team's borrow limits while no other team waits with a job it "
                     "may run (policy.borrow_limit_applies: WhileOthersWait); Kueue's borrowingLimit always "
                     "binds (leave it unset for borrowing bounded only by the others' demand)")
    if p.idle_compute_allocation == IdleComputeAllocation.FAIR_SHARE:
        notes.append("fair share: enable fair sharing in Kueue's Configuration (fairSharing: {enable: true, "
                     "preemptionStrategies: [LessThanOrEqualToFinalShare]}), which no CRD object sets; the "
                     "ClusterQueues carry the weights. Only that strategy: fairpod preempts for fair share only "
                     "while the preemptor's share after admission stays at or below the victim's after the "
                     "removal; Kueue's LessThanInitialShare would also stop jobs of a team whose share was higher "
                     "only before (docs/policies.md, D5)")
    else:
        notes.append("first come first serve for idle capacity: leave fair sharing disabled in Kueue's "
                     "Configuration (the fairSharing weights are then unused)")
    if p.task_prioritization == TaskPrioritization.FIRST_COME_FIRST_SERVE and p.priority_classes:
        notes.append("FirstComeFirstServe ignores priority: every WorkloadPriorityClass has value 0 so that Kueue "
                     "orders by arrival; the weights are kept in the fairpod.dev/priority-class annotation")
    if any(t.run_as for t in spec.teams) or spec.cluster.run_as:
        notes.append("run_as (the OS user of a team's replicas) has no Kueue equivalent: set the pods' "
                     "securityContext.runAsUser")
    return notes


def export_kueue(spec: ClusterSpec) -> Export:
    for i, g in enumerate(spec.cluster.instance_groups):
        if g.accelerator_partition_type:
            raise ExportError(f"cluster.instance_groups[{i}].accelerator_partition_type: MIG partitions "
                              f"({g.accelerator_partition_type}) are not exported to Kueue yet")
    cat = spec.catalog()
    flavors = flavor_names(spec)
    covered = sorted({K.accel_resource(cat[it].accelerator_kind) for it in flavors}) + [K.CPU, K.MEMORY]
    if not flavors:
        covered = [K.GPU, K.CPU, K.MEMORY]
    objs: list[dict[str, Any]] = []
    for t in spec.teams:
        objs += [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in namespaces(t)]
    custom = {t.name for t in spec.instance_types}
    levels = spec.cluster.topology_levels
    if levels:
        objs.append({"apiVersion": K.API, "kind": "Topology", "metadata": {"name": spec.cluster.name},
                     "spec": {"levels": [{"nodeLabel": K.TOPOLOGY_LABEL + lv} for lv in levels]
                              + [{"nodeLabel": K.HOSTNAME_LABEL}]}})
    for it, fname in flavors.items():
        meta: dict[str, Any] = {"name": fname}
        if it in custom:
            meta["annotations"] = {K.ANN_INSTANCE_TYPE: _dump(cat[it].model_dump(mode="json"))}
        elif it not in BUILTIN_INSTANCE_TYPES:  # unreachable for a valid spec
            raise ExportError(f"unknown instance type {it!r}")
        objs.append({"apiVersion": K.API, "kind": "ResourceFlavor", "metadata": meta,
                     "spec": {"nodeLabels": {K.INSTANCE_LABEL: it},
                              **({"topologyName": spec.cluster.name} if levels else {})}})
    policy = spec.policy.model_dump(mode="json", exclude={"priority_classes"})
    objs.append({"apiVersion": K.API, "kind": "Cohort",
                 "metadata": {"name": spec.cluster.name,
                              "annotations": {K.ANN_CLUSTER: _dump(spec.cluster.model_dump(mode="json")),
                                              K.ANN_POLICY: _dump(policy)}},
                 "spec": {}})
    for g in spec.groups_top_down():
        if g.name == spec.cluster.name:
            raise ExportError(f"groups: group {g.name!r} has the cluster's name, which the top Cohort takes; rename "
                              "one of them")
        objs.append(_group_cohort(spec, g, flavors, covered))
    for t in spec.teams:
        objs.append(_cluster_queue(spec, t, flavors, covered))
    if spec.policy.idle_resource_sharing == Toggle.ENABLED:
        un = _unallocated(spec, flavors, covered)
        if un is not None:
            objs.append(un)
    for t in spec.teams:
        objs += [{"apiVersion": K.API, "kind": "LocalQueue", "metadata": {"name": q, "namespace": ns},
                  "spec": {"clusterQueue": K.cluster_queue(t.name)}}
                 for ns in namespaces(t) for q in (t.local_queues or [K.local_queue(t.name)])]
    ranking = spec.policy.task_prioritization == TaskPrioritization.TASK_RANKING
    for pc in spec.policy.priority_classes:
        objs.append({"apiVersion": K.API, "kind": "WorkloadPriorityClass",
                     "metadata": {"name": K.priority_class(pc.name),
                                  "annotations": {K.ANN_PRIORITY_CLASS: _dump(pc.model_dump(mode="json"))}},
                     "value": pc.weight if ranking else 0,
                     "description": f"fairpod priority class {pc.name} (weight {pc.weight})"})
    notes = unexpressible(spec)
    comments = {
        "00-namespaces.yaml": ["One namespace per team, as HyperPod task governance names them."],
        "10-resourceflavors.yaml": ["One ResourceFlavor per instance type; nodes carry the instance-type label."]
        + ([f"Topology {spec.cluster.name}: label each node {K.TOPOLOGY_LABEL}<level>=<its domain> for "
            f"{', '.join(levels)}."] if levels else []),
        "20-cohort.yaml": [f"Cluster {spec.cluster.name}: every team's ClusterQueue lends and borrows in this "
                           "cohort" + (", through the Cohorts of its groups (parentName)." if spec.groups else "."),
                           "Node counts and policy knobs Kueue has no field for are kept in the "
                           "fairpod.dev/ annotations (read back by 'fairpod import kueue')."],
        "30-clusterqueues.yaml": ["One ClusterQueue per team. fairpod rules Kueue cannot express:",
                                  *(f"- {n}" for n in notes)],
        "40-localqueues.yaml": ["Submit with the label kueue.x-k8s.io/queue-name: hyperpod-ns-<team>-localqueue."],
        "50-workloadpriorityclasses.yaml": ["Label jobs kueue.x-k8s.io/priority-class: <class>-priority."],
    }
    return Export(objs, notes, comments)


# libyaml's emitter where PyYAML was built with it: the same text as yaml.safe_dump (every object of
# tests/formats/kube/specs.py's corpus), in a fifth of the time (a 10,000-node export: seconds)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def render(ex: Export) -> dict[str, str]:
    """File name -> YAML text (comments first), for the files that hold objects."""
    out: dict[str, str] = {}
    for fname, kinds in FILES.items():
        docs = [o for o in ex.objects if o["kind"] in kinds]
        if not docs:
            continue
        head = "".join(f"# {line}\n" for line in ["Written by 'fairpod export kueue'.", *ex.comments.get(fname, [])])
        body = "---\n".join(yaml.dump(d, Dumper=_DUMPER, sort_keys=False, default_flow_style=False, width=120)
                             for d in docs)
        out[fname] = head + body
    return out


def write(ex: Export, directory: Path) -> list[Path]:
    """Write the files into ``directory`` (created if missing); files of an earlier export that this one has
    no objects for are removed, so ``kubectl apply -f DIR`` never applies stale objects."""
    directory.mkdir(parents=True, exist_ok=True)
    texts = render(ex)
    written = []
    for fname in FILES:
        p = directory / fname
        if fname in texts:
            p.write_text(texts[fname])
            written.append(p)
        elif p.exists() and p.read_text().startswith("# Written by 'fairpod export kueue'."):
            p.unlink()
    return written
