"""``fairpod import kueue DIR``: Kueue objects (written by ``fairpod export kueue``, or HyperPod's own) back
into a fairpod cluster spec.

Kueue's fields are the truth. What they determine is read from them: teams (ClusterQueue
``hyperpod-ns-<team>-clusterqueue``, or the namespace its selector or LocalQueue names), quotas per instance
type (the flavor's ``node.kubernetes.io/instance-type`` label), sharing strategy and borrow limit (from
``lendingLimit`` / ``borrowingLimit``), own-task preemption (``withinClusterQueue``), fair-share weight,
priority classes (WorkloadPriorityClasses ``<class>-priority``), idle resource sharing (a
``fairpod-unallocated`` ClusterQueue). fairpod's ``fairpod.dev/`` annotations supply what Kueue has no field for
(node counts, custom instance types, policy knobs) and the form a value was written in: the spec they describe
is taken as is only when exporting it gives back exactly the Kueue fields read; otherwise (objects edited
after the export, or HyperPod's own) the spec is read from the Kueue fields and every guess is reported.

Each kind is read in a module of its own: the objects of the directory (``kube.kueue_objects``), ResourceFlavors
(``kube.kueue_flavors``), ClusterQueues, LocalQueues and WorkloadPriorityClasses (``kube.kueue_queues``), Cohorts
(``kube.kueue_cohorts``); here they are put together into one spec.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fairpod.formats.kube import kueue as K
from fairpod.formats.kube.export import export_kueue
from fairpod.formats.kube.kueue_cohorts import own_quota, read_group
from fairpod.formats.kube.kueue_flavors import read_flavors, size_derived
from fairpod.formats.kube.kueue_objects import ImportError_, Objects, annotation, as_map, name_of
from fairpod.formats.kube.kueue_queues import priority_classes, read_team, team_of_queue
from fairpod.formats.kube.manifest import ManifestError, quantity
from fairpod.model.catalog import BUILTIN_INSTANCE_TYPES, InstanceType
from fairpod.model.resources import ZERO, Res, node_res
from fairpod.model.spec import NAME_PATTERN, ClusterSpec, QuotaEntry, SpecError, parse_spec


@dataclass
class Imported:
    spec: ClusterSpec
    notes: list[str] = field(default_factory=list)
    from_annotations: bool = False


def read_dir(path: Path) -> list[Any]:
    """Every YAML/JSON document under ``path`` (a directory, read in name order, or one file)."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()
                                                  and p.suffix in (".yaml", ".yml", ".json"))
    if not path.exists():
        raise ImportError_(f"{path}: no such file or directory")
    if not files:
        raise ImportError_(f"{path}: no .yaml, .yml or .json file")
    docs: list[Any] = []
    for f in files:
        try:
            docs += [d for d in yaml.safe_load_all(f.read_text()) if d is not None]
        except (OSError, UnicodeDecodeError) as e:
            raise ImportError_(f"{f}: cannot read: {e}") from None
        except yaml.YAMLError as e:
            raise ImportError_(f"{f}: not valid YAML: {str(e).splitlines()[0]}") from None
    return docs



# -- the Kueue part of objects, for comparing an export with what was read ---------------------------------


def _norm(v: Any, key: str = "") -> Any:
    if isinstance(v, dict):
        return {k: _norm(x, k) for k, x in sorted(v.items())}
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if key in ("nominalQuota", "borrowingLimit", "lendingLimit", "weight") and isinstance(v, (int, float, str)):
        try:
            return round(quantity(v, key), 6)
        except ManifestError:
            return v
    return v


def _kueue_part(objs: list[dict[str, Any]]) -> dict[tuple[str, str, str], Any]:
    out = {}
    for o in objs:
        if o.get("kind") not in K.KINDS:
            continue
        meta = o.get("metadata") or {}
        key = (str(o["kind"]), str(meta.get("namespace") or ""), str(meta.get("name")))
        out[key] = _norm({"api": o.get("apiVersion"), "spec": o.get("spec"), "value": o.get("value"),
                          "role": as_map(meta.get("labels"), f"{key[0]} {key[2]}.metadata.labels").get(K.ROLE_LABEL)})
    return out


def _group_name(it: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", it.lower()).strip("-")[:36].strip("-") or "nodes"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    taken.add(name)
    return name


def from_kueue(objs: Objects, notes: list[str], given: dict[str, str] | None = None) -> dict[str, Any]:
    """The spec the Kueue fields describe (no fairpod annotation read); ``given``: ``--flavor NAME=TYPE``."""
    flavors, custom, derived = read_flavors(objs, notes, given or {})
    custom += size_derived(objs, flavors, derived, notes)
    cat = dict(BUILTIN_INSTANCE_TYPES)
    for c in custom:
        try:
            cat[c["name"]] = InstanceType.model_validate(c)
        except ValueError as e:
            raise ImportError_(f"instance type {c['name']}: annotation {K.ANN_INSTANCE_TYPE} is not valid: "
                               f"{str(e).splitlines()[0]}") from None
    # the tree of cohorts: its root is the cluster, every other Cohort a group (parentName: its parent)
    parents: dict[str, str] = {}
    for c in objs.by_kind["Cohort"]:
        parents[name_of(c)] = str(as_map(c.get("spec"), f"Cohort {name_of(c)}.spec").get("parentName") or "")
    for c in list(parents.values()):
        if c and c not in parents:
            parents[c] = ""  # a parent named but not defined: Kueue's default cohort
    in_cohort: dict[str, str] = {}
    for cq in objs.by_kind["ClusterQueue"]:
        s = as_map(cq.get("spec"), "ClusterQueue.spec")
        c = s.get("cohortName") or s.get("cohort")
        if c:
            in_cohort[name_of(cq)] = str(c)
            parents.setdefault(str(c), "")
    roots = [c for c, parent in parents.items() if not parent]
    if len(roots) > 1:
        raise ImportError_(f"several cohorts ({', '.join(roots)}): a fairpod cluster is one cohort tree; import "
                           "each tree's objects separately")
    root = roots[0] if roots else ""
    cluster = root or "fairpod"
    if not re.match(NAME_PATTERN, cluster) or len(cluster) > 40:
        fixed = re.sub(r"[^a-z0-9-]+", "-", cluster.lower()).strip("-")[:40].strip("-") or "fairpod"
        notes.append(f"cohort {cluster}: cluster name read as {fixed}")
        cluster = fixed
    queues: dict[str, list[tuple[str, str]]] = {}
    for lq in objs.by_kind["LocalQueue"]:
        target = str(as_map(lq.get("spec"), "LocalQueue.spec").get("clusterQueue") or "")
        queues.setdefault(target, []).append((str(lq["metadata"].get("namespace") or ""), name_of(lq)))
    teams: list[dict[str, Any]] = []
    totals: dict[str, Res] = {}
    ranking_seen: list[bool] = []
    borrow_seen: list[tuple[str, int | None]] = []  # ClusterQueues with borrowWithinCohort LowerPriority
    unallocated = False
    for cq in objs.by_kind["ClusterQueue"]:
        labels = as_map(cq["metadata"].get("labels"), "metadata.labels")
        if labels.get(K.ROLE_LABEL) == "unallocated" or name_of(cq) == K.UNALLOCATED:
            unallocated = True
            _, nominal = read_team(cq, K.UNALLOCATED, flavors, cat, [], [], derived)
        else:
            team, names = team_of_queue(cq, queues, notes)
            if any(t["name"] == team for t in teams):
                raise ImportError_(f"ClusterQueue {name_of(cq)}: a second ClusterQueue for team {team}")
            t, nominal = read_team(cq, team, flavors, cat, ranking_seen, notes, derived, borrow_seen)
            t.update(names)
            if in_cohort.get(name_of(cq), root) != root:
                t["group"] = in_cohort[name_of(cq)]
            teams.append(t)
            expected = K.local_queue(team)
            if not queues.get(name_of(cq)):
                notes.append(f"team {team}: no LocalQueue in namespace {K.namespace(team)} points at ClusterQueue "
                             f"{name_of(cq)} (jobs are submitted to {expected})")
        for it, q in nominal.items():
            totals[it] = totals.get(it, ZERO) + q
    classes = priority_classes(objs, notes)
    if any(c["weight"] for c in classes):
        ranking_seen.append(True)
    owns = {name_of(c): own_quota(c, name_of(c), flavors, cat, []) for c in objs.by_kind["Cohort"]}
    tree = [read_group(c, name, parents, root, flavors, teams, cat, notes, owns)
            for c in objs.by_kind["Cohort"] if (name := name_of(c)) != root]
    tree += [{"name": name} for name, parent in parents.items() if name != root and parent and
             not any(g["name"] == name for g in tree)]
    for g in tree:  # a Cohort's own nominalQuota is capacity too
        for e in g.get("quota", ()):
            it = e["instance_type"]
            totals[it] = totals.get(it, ZERO) + QuotaEntry.model_validate(e).resolve(cat[it])
    for c in objs.by_kind["Cohort"]:
        if name_of(c) == root:  # the root's own quota: shared by every queue of the tree, fairpod's unallocated capacity
            for it, q in own_quota(c, root, flavors, cat, notes).items():
                totals[it] = totals.get(it, ZERO) + q
                unallocated = True
    groups = []
    taken: set[str] = set()
    order = list(dict.fromkeys([*flavors.values(), *totals]))  # a flavor without quota is still a node type
    for it in order:
        total = totals.get(it, ZERO)
        node = node_res(cat[it])
        n = max(math.ceil(total[d] / node[d]) for d in range(3) if node[d]) if total != ZERO else 0
        if n or not any(g["instance_type"] == it for g in groups):
            groups.append({"name": _group_name(it, taken), "instance_type": it, "count": n})
            notes.append(f"instance group {groups[-1]['name']}: {n} x {it}, sized from the quotas (Kueue does not "
                         "count nodes); set your cluster's node count")
    policy: dict[str, Any] = {"idle_compute_allocation": "FairShare"}
    fungible = [as_map(as_map(cq.get("spec"), "ClusterQueue.spec").get("flavorFungibility"), "flavorFungibility")
                for cq in objs.by_kind["ClusterQueue"] if name_of(cq) != K.UNALLOCATED]
    if fungible and fungible[0].get("whenCanBorrow") == "TryNextFlavor":  # (the first ClusterQueue's, for the cluster)
        policy["fallback_when_can_borrow"] = "PreemptionOverBorrowing" if fungible[0].get("preference") == \
            "PreemptionOverBorrowing" else "TryNextInstanceType"
    if any(f != fungible[0] for f in fungible):
        notes.append("flavorFungibility differs between ClusterQueues: fairpod's policy.fallback_when_can_borrow is "
                     "one for the cluster (the first ClusterQueue's is kept)")
    if tree:  # Kueue's hierarchical cohorts take a Cohort's quota back for the queues below it
        policy["hierarchical_reclaim"] = True
        notes.append("nested Cohorts: policy.hierarchical_reclaim on (a job that fits its group's quota takes it "
                     "back from borrowers outside the group, as Kueue does)")
    if borrow_seen:  # Kueue allows borrowWithinCohort with classic preemption only: fair sharing is off there
        policy.update({"idle_compute_allocation": "FirstComeFirstServe", "preempt_to_borrow": "LowerPriority"})
        limits = [t for _, t in borrow_seen if t is not None]
        if limits:
            policy["preempt_to_borrow_max_priority"] = min(limits)
        notes.append(f"borrowWithinCohort LowerPriority ({', '.join(n for n, _ in borrow_seen)}) read as "
                     "policy.preempt_to_borrow: LowerPriority" + (f" with preempt_to_borrow_max_priority "
                     f"{min(limits)}" if limits else "") + ", for every team, and idle compute allocation as "
                     "FirstComeFirstServe (Kueue allows borrowWithinCohort only without fair sharing)")
        if len(borrow_seen) < len(teams) or len(set(t for _, t in borrow_seen)) > 1:
            notes.append("borrowWithinCohort differs between ClusterQueues: fairpod's policy is one for the cluster "
                         "(the lowest maxPriorityThreshold is kept)")
    else:
        notes.append("idle compute allocation read as FairShare (Kueue's Configuration, not its objects, decides "
                     "fair sharing)")
    if not objs.by_kind["ClusterQueue"] and not objs.by_kind["Cohort"]:
        notes.append("only WorkloadPriorityClasses: the spec holds policy.priority_classes alone; add them to your "
                     "cluster's spec (fairpod apply -f replaces the whole spec)")
    for topo in objs.by_kind["Topology"]:
        levels = [str(lv.get("nodeLabel")) for lv in (as_map(topo.get("spec"), "Topology.spec").get("levels") or [])
                  if isinstance(lv, dict)]
        notes.append(f"Topology {name_of(topo)} ({', '.join(levels)}): where each node sits is in the nodes' labels, "
                     "not in Kueue objects; to place by topology, add cluster.topology_levels and each instance "
                     "group's topology to the spec (docs/placement.md)")
    for t in [*teams, *tree]:  # a queue or Cohort that borrows a type without limit and has no quota of it:
        for e in t["sharing"].get("absolute_borrow_limits", ()):  # up to the whole type
            if e.get("count", 0) is None:
                e["count"] = next((g["count"] for g in groups if g["instance_type"] == e["instance_type"]), 0)
    return {
        "cluster": {"name": cluster, "instance_groups": groups},
        "instance_types": custom,
        **({"groups": tree} if tree else {}),
        "policy": {"task_prioritization": "TaskRanking" if ranking_seen else "FirstComeFirstServe",
                   "priority_classes": classes, **policy,
                   "idle_resource_sharing": "Enabled" if unallocated else "Disabled"},
        "teams": teams,
    }  # fmt: skip


def from_annotations(objs: Objects) -> dict[str, Any] | None:
    """The spec fairpod's annotations describe, or None if one is missing."""
    cohorts = [c for c in objs.by_kind["Cohort"] if annotation(c, K.ANN_GROUP) is None]
    if len(cohorts) != 1:
        return None
    cluster, policy = annotation(cohorts[0], K.ANN_CLUSTER), annotation(cohorts[0], K.ANN_POLICY)
    tree = [annotation(c, K.ANN_GROUP) for c in objs.by_kind["Cohort"] if annotation(c, K.ANN_GROUP) is not None]
    teams = [annotation(cq, K.ANN_TEAM) for cq in objs.by_kind["ClusterQueue"]
             if (cq["metadata"].get("labels") or {}).get(K.ROLE_LABEL) != "unallocated"]
    classes = [annotation(w, K.ANN_PRIORITY_CLASS) for w in objs.by_kind["WorkloadPriorityClass"]]
    types = [annotation(f, K.ANN_INSTANCE_TYPE) for f in objs.by_kind["ResourceFlavor"]
             if annotation(f, K.ANN_INSTANCE_TYPE) is not None]
    parts = [cluster, policy, *teams, *classes, *tree]
    if any(not isinstance(p, dict) for p in parts) or any(not isinstance(t, dict) for t in types):
        return None
    return {"cluster": cluster, "instance_types": types, "policy": {**policy, "priority_classes": classes},
            **({"groups": tree} if tree else {}), "teams": teams}  # type: ignore[dict-item]


def import_kueue(docs: list[Any], flavors: dict[str, str] | None = None) -> Imported:
    """The spec of ``docs``; ``flavors``: ResourceFlavor name -> instance type (``--flavor NAME=TYPE``), which
    wins over what the objects say."""
    notes: list[str] = []
    objs = Objects(docs, notes)
    read = _kueue_part([o for kind in K.KINDS for o in objs.by_kind[kind]])
    annotated = from_annotations(objs)
    if annotated is not None and not flavors:
        try:
            spec = parse_spec(annotated)
            if _kueue_part(export_kueue(spec).objects) == read:
                return Imported(spec, notes, from_annotations=True)
        except (SpecError, ValueError):
            pass
    derived_notes: list[str] = []
    data = from_kueue(objs, derived_notes, flavors)
    if annotated is not None:
        # edited after the export: Kueue's fields win; fairpod-only settings still come from the annotations
        notes.append("the Kueue fields differ from what fairpod exported (edited since?): the spec is read from "
                     "the Kueue fields; node counts and fairpod-only settings from the fairpod.dev/ annotations")
        sized = data["cluster"]["instance_groups"]
        data["cluster"] = {**annotated["cluster"], "name": data["cluster"]["name"]}
        have = {g.get("instance_type") for g in data["cluster"].get("instance_groups") or []}
        taken = {g.get("name") for g in data["cluster"].get("instance_groups") or []}
        for g in sized:  # an instance type added since the export: sized from the quotas, as for foreign objects
            if g["instance_type"] not in have:
                g["name"] = _group_name(g["instance_type"], taken)
                data["cluster"].setdefault("instance_groups", []).append(g)
                notes.append(f"instance group {g['name']}: {g['count']} x {g['instance_type']}, sized from the "
                             "quotas (Kueue does not count nodes); set your cluster's node count")
        pol = annotated["policy"]
        kueue_says = ("task_prioritization", "priority_classes", "idle_resource_sharing")
        data["policy"].update({k: v for k, v in pol.items() if k not in kueue_says})
        old = {t.get("name"): t for t in annotated["teams"]}
        for t in data["teams"]:
            prev = old.get(t["name"])
            if not isinstance(prev, dict):
                continue
            t.update({k: v for k, v in prev.items() if k not in t and k not in ("sharing", "quota")})
            limit = (prev.get("sharing") or {}).get("borrow_limit")
            if t["sharing"]["strategy"] != "LendAndBorrow" and limit is not None:
                t["sharing"]["borrow_limit"] = limit  # unused by Lend and DontLend: kept as it was
        derived_notes = [n for n in derived_notes if not n.startswith(("instance group ", "idle compute"))]
    else:
        notes.append("no fairpod.dev/ annotations (objects not written by fairpod): read from the Kueue fields")
    notes += derived_notes
    try:
        spec = parse_spec(data)
    except SpecError as e:
        raise ImportError_("the objects make no valid fairpod spec: " + "; ".join(e.problems)) from None
    return Imported(spec, notes)


def spec_yaml(spec: ClusterSpec) -> str:
    """The spec as YAML, without the fields left at their defaults."""
    return yaml.safe_dump(spec.model_dump(mode="json", exclude_defaults=True), sort_keys=False)
