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

Longer than fairpod's usual module (~550 lines): each Kueue kind's reading and its one-line errors naming the
object's field sit beside the others they are cross-checked with (flavors, cluster queues, local queues,
priority classes); they are read in one pass over one directory.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fairpod.formats.kube import ManifestError, quantity
from fairpod.formats.kube import kueue as K
from fairpod.formats.kube.export import borrowing_limit, export_kueue
from fairpod.model.catalog import BUILTIN_INSTANCE_TYPES, InstanceType
from fairpod.model.resources import ZERO, Res, node_res
from fairpod.model.spec import NAME_PATTERN, ClusterSpec, QuotaEntry, SpecError, parse_spec


class ImportError_(ValueError):  # noqa: N801 - ImportError is a builtin
    """Objects that cannot be read as a fairpod spec; the message names the object and field. It is one line:
    control characters of the objects' own strings (a name, a label) it quotes are shown escaped."""

    def __init__(self, message: str) -> None:
        super().__init__("".join(c if c.isprintable() else repr(c)[1:-1] for c in message))


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


def _flatten(docs: list[Any]) -> list[dict[str, Any]]:
    out = []
    for i, d in enumerate(docs):
        if not isinstance(d, dict):
            raise ImportError_(f"document {i + 1} is not a mapping")
        if str(d.get("kind", "")).endswith("List") and isinstance(d.get("items"), list):
            out += _flatten(d["items"])
        else:
            out.append(d)
    return out


def _map(v: Any, where: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ImportError_(f"{where} must be a mapping")
    return v


def _list(v: Any, where: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ImportError_(f"{where} must be a list")
    return v


def _qty(v: Any, where: str) -> float:
    try:
        return quantity(v, where)
    except ManifestError as e:
        raise ImportError_(str(e)) from None


# Kueue objects with no fairpod meaning: refused by their own name (not skipped: a cluster that needs them
# would silently run differently)
_CHECKS = "admission checks (provisioning requests, MultiKueue) gate admission on another system; fairpod admits by " \
    "its own quota rules and has none"
REFUSED = {
    "AdmissionCheck": _CHECKS,
    "ProvisioningRequestConfig": _CHECKS,
    "MultiKueueConfig": "MultiKueue dispatches workloads to other Kubernetes clusters; a fairpod server schedules "
    "its own nodes (Ray for several hosts)",
    "MultiKueueCluster": "MultiKueue dispatches workloads to other Kubernetes clusters; a fairpod server schedules "
    "its own nodes (Ray for several hosts)",
    "AdmissionFairSharingStatus": "Kueue's status, not configuration",
}


class _Objects:
    def __init__(self, docs: list[Any], notes: list[str]) -> None:
        self.by_kind: dict[str, list[dict[str, Any]]] = {k: [] for k in K.KINDS}
        seen: set[tuple[str, str, str]] = set()
        skipped: list[str] = []
        for d in _flatten(docs):
            kind, api = str(d.get("kind", "")), str(d.get("apiVersion", ""))
            meta = _map(d.get("metadata"), f"{kind or 'object'}.metadata")
            name = str(meta.get("name") or "")
            if kind in K.KINDS and api in K.READ_APIS:
                if not name:
                    raise ImportError_(f"a {kind} has no metadata.name")
                key = (kind, str(meta.get("namespace") or ""), name)
                if key in seen:
                    raise ImportError_(f"{kind} {name} is defined twice")
                seen.add(key)
                self.by_kind[kind].append(d)
            elif kind == "Namespace" and api == "v1":
                continue
            else:
                skipped.append(f"{kind or '(no kind)'}/{name or '?'} ({api or 'no apiVersion'})")
        refused = [f"{kind} {name or '?'}: {why}" for d in _flatten(docs)
                   if (why := REFUSED.get(kind := str(d.get("kind", "")))) is not None
                   and str(d.get("apiVersion", "")).startswith(K.GROUP)
                   for name in [str(_map(d.get("metadata"), "metadata").get("name") or "")]]
        for cq in self.by_kind["ClusterQueue"]:
            for key in ("admissionChecks", "admissionChecksStrategy"):
                if _map(cq.get("spec"), "ClusterQueue.spec").get(key):
                    refused.append(f"ClusterQueue {_name(cq)}.spec.{key}: {REFUSED['AdmissionCheck']}")
        if refused:  # one answer: the objects of each reason, then the reason
            by_why: dict[str, list[str]] = {}
            for r in refused:
                what, why = r.split(": ", 1)
                by_why.setdefault(why, []).append(what)
            raise ImportError_("no fairpod meaning: " + "; ".join(f"{', '.join(w)}: {why}" for why, w in by_why.items()))
        if skipped:
            notes.append(f"skipped (not a Kueue object fairpod reads): {', '.join(skipped)}")
        if not self.by_kind["ClusterQueue"] and not self.by_kind["Cohort"] \
                and not self.by_kind["WorkloadPriorityClass"]:
            raise ImportError_("no kueue.x-k8s.io ClusterQueue, Cohort or WorkloadPriorityClass found: nothing to "
                               "read a cluster from")


def _ann(obj: dict[str, Any], key: str) -> Any:
    raw = _map(obj.get("metadata"), "metadata").get("annotations") or {}
    if not isinstance(raw, dict) or key not in raw:
        return None
    try:
        return json.loads(str(raw[key]))
    except ValueError:
        return None


def _name(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


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
                          "role": _map(meta.get("labels"), f"{key[0]} {key[2]}.metadata.labels").get(K.ROLE_LABEL)})
    return out


# -- reading the Kueue fields --------------------------------------------------------------------------------


def _catalog_type(label: str) -> str | None:
    """The catalog's instance type of a node label's value: itself, or SageMaker's ``ml.`` name of an EC2 type
    (EKS nodes are labelled ``p4d.24xlarge``)."""
    return next((t for t in (label, f"ml.{label}") if t in BUILTIN_INSTANCE_TYPES), None)


def _flavors(objs: _Objects, notes: list[str], given: dict[str, str]
             ) -> tuple[dict[str, str], list[dict[str, Any]], set[str]]:
    """ResourceFlavor name -> instance type; the custom instance types, in file order; and the flavors that name
    no instance type, each read as a node type of its own (sized from the quotas by ``_size_derived``).

    A flavor's instance type is, in order: ``--flavor NAME=TYPE``; its ``node.kubernetes.io/instance-type`` node
    label; its own name when that is an instance type fairpod knows; else a type of its own."""
    out: dict[str, str] = {}
    custom: list[dict[str, Any]] = []
    derived: set[str] = set()
    for rf in objs.by_kind["ResourceFlavor"]:
        fname = _name(rf)
        labels = _map(_map(rf.get("spec"), f"ResourceFlavor {fname}.spec").get("nodeLabels"),
                      f"ResourceFlavor {fname}.spec.nodeLabels")
        label = next((str(labels[k]) for k in K.INSTANCE_LABELS if k in labels), None)
        it = given.get(fname) or label
        if it is not None and it not in BUILTIN_INSTANCE_TYPES and _ann(rf, K.ANN_INSTANCE_TYPE) is None:
            known = _catalog_type(it)
            if known is None and fname in given:
                raise ImportError_(f"--flavor {fname}={it}: {it} is not an instance type fairpod knows (fairpod "
                                   "instance-types lists them)")
            if known is not None:
                notes.append(f"ResourceFlavor {fname}: instance type {it} read as {known}")
                it = known
        if it is None:
            if fname in BUILTIN_INSTANCE_TYPES:
                it = fname
                notes.append(f"ResourceFlavor {fname}: no {K.INSTANCE_LABEL} node label; read as the instance type "
                             "of its name")
            else:
                it = _type_name(fname)
                derived.add(it)
                out[fname] = it
                continue
        out[fname] = it
        if it not in BUILTIN_INSTANCE_TYPES:
            ann = _ann(rf, K.ANN_INSTANCE_TYPE)
            if not isinstance(ann, dict):
                raise ImportError_(f"ResourceFlavor {fname}: instance type {it} is not in fairpod's catalog and the "
                                   f"flavor has no {K.ANN_INSTANCE_TYPE} annotation: define it under instance_types "
                                   f"(accelerators, vcpu, memory_gib), or give --flavor {fname}=TYPE")
            if any(c["name"] == it for c in custom):
                continue
            custom.append({**ann, "name": it})
    for fname, it in given.items():
        if fname not in out:
            if it not in BUILTIN_INSTANCE_TYPES and _catalog_type(it) is None:
                raise ImportError_(f"--flavor {fname}={it}: {it} is not an instance type fairpod knows")
            out[fname] = _catalog_type(it) or it
    return out, custom, derived


def _type_name(flavor: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", flavor).strip("-.")[:63] or "flavor"


def _size_derived(objs: _Objects, flavors: dict[str, str], derived: set[str], notes: list[str]
                  ) -> list[dict[str, Any]]:
    """A node type for each flavor that names no instance type: the largest quota one ClusterQueue gives it (so
    that each team's quota is vCPU, memory and accelerators of it); what no queue gives, 1 vCPU or 1 GiB."""
    out = []
    for fname, it in flavors.items():
        if it not in derived:
            continue
        top = {"acc": 0.0, "cpu": 0.0, "mem": 0.0}
        for cq in objs.by_kind["ClusterQueue"]:
            for g in _list(_map(cq.get("spec"), "spec").get("resourceGroups"), "resourceGroups"):
                for f in _list(_map(g, "resourceGroup").get("flavors"), "flavors"):
                    if isinstance(f, dict) and str(f.get("name")) == fname:
                        r = _resources(f, f"ClusterQueue {_name(cq)} flavor {fname}", [])["nominalQuota"]
                        top = {k: max(v, float(r[k] or 0)) for k, v in top.items()}
        t = {"name": it, "accelerators": int(top["acc"]), "vcpu": max(top["cpu"] / 1000, 1.0),
             "memory_gib": max(round(top["mem"] / 1024, 3), 1.0)}
        out.append(t)
        kind = f"{t['accelerators']} accelerators, " if t["accelerators"] else ""
        notes.append(f"ResourceFlavor {fname}: names no instance type, so it is a node type of its own ({kind}"
                     f"{t['vcpu']:g} vCPU, {t['memory_gib']:g} GiB: the largest quota one ClusterQueue gives it) and "
                     f"its quotas are vCPU and memory of it; to map it to an instance type: fairpod import kueue "
                     f"--flavor {fname}=TYPE")
    return out


def _resources(flavor: dict[str, Any], where: str, notes: list[str]) -> dict[str, dict[str, float | None]]:
    """{nominalQuota|borrowingLimit|lendingLimit: {acc, cpu, mem}} of one flavor (None: not set)."""
    out: dict[str, dict[str, float | None]] = {f: {"acc": None, "cpu": None, "mem": None}
                                               for f in ("nominalQuota", "borrowingLimit", "lendingLimit")}
    ignored = []
    for r in _list(flavor.get("resources"), f"{where}.resources"):
        r = _map(r, where)
        rname = str(r.get("name"))
        dim = "acc" if rname in K.ACCEL_RESOURCES else "cpu" if rname == K.CPU else "mem" if rname == K.MEMORY \
            else None
        if dim is None:
            ignored.append(rname)
            continue
        for f in out:
            if r.get(f) is not None:
                v = _qty(r[f], f"{where} {rname}.{f}")
                if dim == "cpu":
                    v = round(v * 1000)
                elif dim == "mem":
                    v = round(v / 2**20)
                prev = out[f][dim]
                out[f][dim] = v if prev is None else prev + v
    if ignored:
        notes.append(f"{where}: {', '.join(ignored)} not known to fairpod (accelerators, cpu, memory); ignored")
    return out


def _res(d: dict[str, float | None]) -> Res:
    return Res(int(d["acc"] or 0), int(d["cpu"] or 0), int(d["mem"] or 0))


def _quota_entry(it: InstanceType, d: dict[str, float | None], units: bool = False) -> dict[str, Any]:
    """A team's quota of ``it``: a node count where the quota is whole nodes (unless ``units``), else accelerators,
    vCPU and memory."""
    q = _res(d)
    node = node_res(it)
    if q == ZERO:
        return {"instance_type": it.name, "count": 0}
    ref = node.acc or node.mcpu
    n = (q.acc if node.acc else q.mcpu) / ref
    if not units and d["cpu"] is not None and d["mem"] is not None and n == int(n) and node.scale(int(n)) == q:
        return {"instance_type": it.name, "count": int(n)}
    entry: dict[str, Any] = {"instance_type": it.name}
    if d["acc"] is not None and (it.accelerators or d["cpu"] is None):
        entry["accelerators"] = q.acc
    if d["cpu"] is not None:
        entry["vcpu"] = q.mcpu / 1000
    if d["mem"] is not None:
        entry["memory_gib"] = q.mib / 1024
    return entry


def _limit_entry(it: InstanceType, d: dict[str, float | None]) -> dict[str, Any]:
    """A lending or absolute borrow limit of one flavor: one unit (whole nodes, else accelerators, vCPU or memory);
    the others follow the type's ratio."""
    entry = _quota_entry(it, d)
    if "count" not in entry:
        unit = next(k for k in ("accelerators", "vcpu", "memory_gib") if k in entry)
        entry = {"instance_type": entry["instance_type"], unit: entry[unit]}
    return entry


def _lend_and_borrow(what: str, with_quota: list[tuple[Any, Any]], notes: list[str]) -> dict[str, Any]:
    """LendAndBorrow with the borrow limit % that ``what``'s (quota, borrowingLimit) pairs make: no borrowingLimit
    is unlimited borrowing (fairpod's largest limit, 500 %); limits that are no single % are read as the nearest."""
    if not with_quota or any(b is None for _, b in with_quota):
        notes.append(f"{what}: no borrowingLimit (unlimited borrowing); read as fairpod's largest borrow limit, 500 %")
        return {"strategy": "LendAndBorrow", "borrow_limit": 500}
    pairs = [(q, b) for q, b in with_quota if b is not None]
    bl = _borrow_limit(pairs)
    if bl is None or not all(borrowing_limit(q, bl) == b for q, b in pairs):
        notes.append(f"{what}: its borrowingLimits are no single borrow limit %; read as {bl} %")
    return {"strategy": "LendAndBorrow", "borrow_limit": bl or 50}


def _borrow_limit(pairs: list[tuple[Res, Res]]) -> int | None:
    """The borrow limit % that gives exactly these (quota, borrowingLimit) pairs, else the nearest on the first
    quota's accelerators (or vCPU)."""
    for bl in range(1, 501):
        if all(borrowing_limit(q, bl) == b for q, b in pairs):
            return bl
    q, b = pairs[0]
    num, den = (b.acc, q.acc) if q.acc else (b.mcpu, q.mcpu)
    return None if not den else min(500, max(1, round(100 * num / den)))


def _team_of(cq: dict[str, Any], queues: dict[str, list[tuple[str, str]]], notes: list[str]
             ) -> tuple[str, dict[str, list[str]]]:
    """The team of a ClusterQueue, and the namespaces and LocalQueue names its jobs use when they are not
    HyperPod's for the team (the spec's ``namespaces``/``local_queues``). HyperPod's names say the team; else the
    ClusterQueue's name is the team's (Kueue's samples: ``cluster-queue`` with a LocalQueue ``user-queue``)."""
    name = _name(cq)
    lqs = queues.get(name, [])
    sel = _map(_map(cq.get("spec"), "spec").get("namespaceSelector"), "namespaceSelector")
    picked = _map(sel.get("matchLabels"), "namespaceSelector.matchLabels").get(K.NS_LABEL)
    spaces = sorted({ns for ns, _ in lqs if ns} | ({str(picked)} if picked else set()))
    team = K.team_in(K.CQ_RE, name)
    if team is None:
        hp = {t for ns in spaces if (t := K.team_in(K.NS_RE, ns))}
        team = hp.pop() if len(hp) == 1 else None
    if team is None:
        team = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:40].strip("-") or "team"
        notes.append(f"ClusterQueue {name}: team {team}"
                     + (f" (namespaces {', '.join(spaces)})" if spaces else " (no LocalQueue points at it)"))
    names: dict[str, list[str]] = {}
    if spaces and spaces != [K.namespace(team)]:
        names["namespaces"] = spaces
    local = sorted({q for _, q in lqs})
    if local and local != [K.local_queue(team)]:
        names["local_queues"] = local
    return team, names


def _team(cq: dict[str, Any], team: str, flavors: dict[str, str], cat: dict[str, InstanceType],
          ranking_seen: list[bool], notes: list[str], derived: frozenset[str] | set[str] = frozenset(),
          borrow_seen: list[tuple[str, int | None]] | None = None) -> tuple[dict[str, Any], dict[str, Res]]:
    name = _name(cq)
    spec = _map(cq.get("spec"), f"ClusterQueue {name}.spec")
    quota: list[dict[str, Any]] = []
    nominal: dict[str, Res] = {}
    lend_zero: list[bool] = []
    borrow: list[tuple[Res, Res | None]] = []
    lend_limits: list[dict[str, Any]] = []
    only_borrows: list[dict[str, Any]] = []
    for gi, g in enumerate(_list(spec.get("resourceGroups"), f"ClusterQueue {name}.spec.resourceGroups")):
        where = f"ClusterQueue {name}.spec.resourceGroups[{gi}]"
        for fl in _list(_map(g, where).get("flavors"), f"{where}.flavors"):
            f = _map(fl, f"{where}.flavors[]")
            fname = str(f.get("name"))
            fwhere = f"ClusterQueue {name} flavor {fname}"
            if fname in flavors:
                it = flavors[fname]
            elif fname in BUILTIN_INSTANCE_TYPES:
                it = fname
                notes.append(f"{fwhere}: no ResourceFlavor {fname}; read as the instance type of its name")
            else:
                raise ImportError_(f"{fwhere}: no ResourceFlavor {fname} defines its instance type")
            if it in nominal:
                raise ImportError_(f"{fwhere}: instance type {it} appears twice")
            r = _resources(f, fwhere, notes)
            quota.append(_quota_entry(cat[it], r["nominalQuota"], units=it in derived))
            q = _res(r["nominalQuota"])
            nominal[it] = q
            ll = [v for v in r["lendingLimit"].values() if v is not None]
            lend_zero.append(bool(ll) and all(v == 0 for v in ll))
            if ll and not all(v == 0 for v in ll) and _res(r["lendingLimit"]) != q:
                lend_limits.append(_limit_entry(cat[it], r["lendingLimit"]))  # a lending limit (docs/policies.md)
            bl = r["borrowingLimit"]
            borrow.append((q, None if all(v is None for v in bl.values()) else _res(bl)))
            if q == ZERO and borrow[-1][1] is None:  # it only borrows, without limit: the type's whole capacity
                only_borrows.append({"instance_type": it, "count": None})  # (``from_kueue`` sizes it)
            elif q == ZERO and borrow[-1][1] != ZERO:  # a type it only borrows: an absolute borrow limit
                only_borrows.append(_limit_entry(cat[it], bl))
    sharing: dict[str, Any]
    with_quota = [(q, b) for q, b in borrow if q != ZERO]
    if only_borrows and (spec.get("cohortName") or spec.get("cohort")) and not (lend_zero and all(lend_zero)):
        sharing = _lend_and_borrow(f"ClusterQueue {name}", with_quota, notes) if with_quota else \
            {"strategy": "LendAndBorrow"}
        sharing["absolute_borrow_limits"] = only_borrows
    elif not spec.get("cohortName") and not spec.get("cohort"):
        sharing = {"strategy": "DontLend"}
        notes.append(f"ClusterQueue {name}: in no cohort, so it neither lends nor borrows (DontLend)")
    elif lend_zero and all(lend_zero):
        sharing = {"strategy": "DontLend"}
        if any(b is None or b != ZERO for _, b in borrow):
            notes.append(f"ClusterQueue {name}: borrows but lends nothing, which fairpod has no strategy for; "
                         "read as DontLend")
    elif not with_quota or all(b is not None and b == ZERO for _, b in with_quota):
        sharing = {"strategy": "Lend"}
    else:
        sharing = _lend_and_borrow(f"ClusterQueue {name}", with_quota, notes)
    if lend_limits and sharing["strategy"] != "DontLend":
        sharing["lending_limits"] = lend_limits
    pre = _map(spec.get("preemption"), f"ClusterQueue {name}.spec.preemption")
    within = str(pre.get("withinClusterQueue") or "Never")
    if within != "Never":
        ranking_seen.append(True)
    reclaim = str(pre.get("reclaimWithinCohort") or "Never")
    if reclaim != "Any" and spec.get("cohortName", spec.get("cohort")):
        notes.append(f"ClusterQueue {name}: reclaimWithinCohort {reclaim}: fairpod always takes a team's quota "
                     "back from any borrower (Any)")
    bwc_spec = _map(pre.get("borrowWithinCohort"), "borrowWithinCohort")
    bwc = str(bwc_spec.get("policy") or "Never")
    if bwc == "LowerPriority" and borrow_seen is not None:  # policy.preempt_to_borrow (the spec's, for every team)
        mpt = bwc_spec.get("maxPriorityThreshold")
        borrow_seen.append((name, None if mpt is None else round(_qty(
            mpt, f"ClusterQueue {name}.spec.preemption.borrowWithinCohort.maxPriorityThreshold"))))
    elif bwc != "Never":
        notes.append(f"ClusterQueue {name}: borrowWithinCohort {bwc}: not a policy fairpod knows; read as Never")
    fs = _map(spec.get("fairSharing"), "fairSharing")
    if fs.get("weight") is None:
        weight = 1
        notes.append(f"ClusterQueue {name}: no fairSharing.weight; read as Kueue's default, 1")
    else:
        w = _qty(fs["weight"], f"ClusterQueue {name}.spec.fairSharing.weight")
        weight = min(100, max(0, round(w)))
        if weight != w:
            notes.append(f"ClusterQueue {name}: fairSharing.weight {fs['weight']} read as {weight} (fairpod's "
                         "weights are whole numbers 0..100)")
    out = {"name": team, "fair_share_weight": weight,
           "preempt_team_tasks": within if within in ("Never", "LowerOrNewerEqualPriority") else "LowerPriority",
           "sharing": sharing, "quota": quota}
    return out, nominal


def _priority_classes(objs: _Objects, notes: list[str]) -> list[dict[str, Any]]:
    """The WorkloadPriorityClasses as fairpod priority classes: their values as weights when all are 0..100, else
    spread over 0..100 in the same order (equal values equal weights); a name's ``-priority`` is dropped."""
    read: list[tuple[str, int]] = []
    for wpc in objs.by_kind["WorkloadPriorityClass"]:
        wname = _name(wpc)
        cls = wname[: -len(K.PRIORITY_SUFFIX)] if wname.endswith(K.PRIORITY_SUFFIX) else wname
        if cls == wname:
            notes.append(f"WorkloadPriorityClass {wname}: the name does not end in -priority; class {cls}")
        if not re.match(NAME_PATTERN, cls) or len(cls) > 40:
            raise ImportError_(f"WorkloadPriorityClass {wname}: class {cls!r} is not a fairpod name (lower-case "
                               "letters, digits and '-', at most 40)")
        v = wpc.get("value")
        if not isinstance(v, int) or isinstance(v, bool) or abs(v) > 10**9:
            raise ImportError_(f"WorkloadPriorityClass {wname}: value {v!r} is not a whole number (Kueue's values "
                               "are 32-bit integers)")
        read.append((cls, v))
    if all(0 <= v <= 100 for _, v in read):
        return [{"name": c, "weight": v} for c, v in read]
    levels = sorted({v for _, v in read})
    weight = {v: round(100 * i / (len(levels) - 1)) if len(levels) > 1 else 100 for i, v in enumerate(levels)}
    notes.append("WorkloadPriorityClass values " + ", ".join(f"{c} {v}" for c, v in read) + " are not all 0..100: "
                 "read as fairpod weights in the same order: " + ", ".join(f"{c} {weight[v]}" for c, v in read))
    return [{"name": c, "weight": weight[v]} for c, v in read]


def _ancestors(c: str, parents: dict[str, str]) -> set[str]:
    out: set[str] = set()
    while parents.get(c) and parents[c] not in out:
        c = parents[c]
        out.add(c)
    return out


def _group(c: dict[str, Any], name: str, parents: dict[str, str], root: str, flavors: dict[str, str],
           teams: list[dict[str, Any]], cat: dict[str, InstanceType], notes: list[str],
           owns: dict[str, dict[str, Res]] | None = None) -> dict[str, Any]:
    """A Cohort below the root as a group: parent, weight, and the sharing its borrowing and lending limits give,
    against the quota of the ClusterQueues below it."""
    spec = _map(c.get("spec"), f"Cohort {name}.spec")
    below = {c for c in parents if _ancestors(c, parents) & {name}} | {name}
    quota: dict[str, Res] = {}
    for t in teams:
        if t.get("group") in below:
            for e in t["quota"]:
                it = e["instance_type"]
                quota[it] = quota.get(it, ZERO) + QuotaEntry.model_validate(e).resolve(cat[it])
    for other, own_q in (owns or {}).items():  # the Cohorts below it hold quota of their own
        if other != name and other in below:
            for it, q in own_q.items():
                quota[it] = quota.get(it, ZERO) + q
    borrow: list[tuple[Res, Res | None]] = []
    lend_zero: list[bool] = []
    lend_limits: list[dict[str, Any]] = []
    own: list[dict[str, Any]] = []
    for gi, g in enumerate(_list(spec.get("resourceGroups"), f"Cohort {name}.spec.resourceGroups")):
        where = f"Cohort {name}.spec.resourceGroups[{gi}]"
        for fl in _list(_map(g, where).get("flavors"), f"{where}.flavors"):
            f = _map(fl, f"{where}.flavors[]")
            it = flavors.get(str(f.get("name")), str(f.get("name")))
            if it not in cat:
                continue
            r = _resources(f, f"Cohort {name} flavor {f.get('name')}", notes)
            q = quota.get(it, ZERO)
            if _res(r["nominalQuota"]) != ZERO:  # quota the group holds itself, shared by everyone below it
                own.append(_quota_entry(cat[it], r["nominalQuota"]))
                q = q + _res(r["nominalQuota"])
            ll = [v for v in r["lendingLimit"].values() if v is not None]
            lend_zero.append(bool(ll) and all(v == 0 for v in ll))
            if ll and not all(v == 0 for v in ll):
                lend_limits.append(_limit_entry(cat[it], r["lendingLimit"]))
            bl = r["borrowingLimit"]
            borrow.append((q, None if all(v is None for v in bl.values()) else _res(bl)))
    with_quota = [(q, b) for q, b in borrow if q != ZERO]
    only_borrows = _group_only_borrows(spec, name, below, teams, quota, flavors, cat, notes)
    sharing: dict[str, Any]
    if only_borrows and not with_quota:  # no quota below it: it borrows by absolute limits, as a queue of quota 0
        sharing = {"strategy": "LendAndBorrow", "absolute_borrow_limits": only_borrows}
    elif lend_zero and all(lend_zero):
        sharing = {"strategy": "DontLend"}
    elif with_quota and all(b is not None and b == ZERO for _, b in with_quota):
        sharing = {"strategy": "Lend"}
    else:
        sharing = _lend_and_borrow(f"Cohort {name}", with_quota, notes)
    if lend_limits and sharing["strategy"] != "DontLend":
        sharing["lending_limits"] = lend_limits
    fs = _map(spec.get("fairSharing"), "fairSharing")
    weight = 1 if fs.get("weight") is None else min(100, max(0, round(
        _qty(fs["weight"], f"Cohort {name}.spec.fairSharing.weight"))))
    out: dict[str, Any] = {"name": name, "fair_share_weight": weight, "sharing": sharing}
    if own:
        out["quota"] = own
    parent = parents.get(name, "")
    if parent and parent != root:
        out["parent"] = parent
    return out


def _group_only_borrows(spec: dict[str, Any], name: str, below: set[str], teams: list[dict[str, Any]],
                        quota: dict[str, Res], flavors: dict[str, str], cat: dict[str, InstanceType],
                        notes: list[str]) -> list[dict[str, Any]]:
    """The types a Cohort's queues borrow but nobody below it holds quota of: in Kueue the Cohort borrows them up
    to its borrowingLimit (none: the whole type), so the group gets absolute borrow limits (count None: sized
    later to the type's nodes)."""
    used = {e["instance_type"] for t in teams if t.get("group") in below
            for e in [*t["quota"], *t["sharing"].get("absolute_borrow_limits", ())]}
    limits: dict[str, dict[str, Any]] = {}
    for g in _list(spec.get("resourceGroups"), f"Cohort {name}.spec.resourceGroups"):
        for fl in _list(_map(g, f"Cohort {name}.spec.resourceGroups[]").get("flavors"), "flavors"):
            f = _map(fl, f"Cohort {name}.spec.resourceGroups[].flavors[]")
            it = flavors.get(str(f.get("name")), str(f.get("name")))
            bl = _resources(f, f"Cohort {name} flavor {f.get('name')}", notes)["borrowingLimit"] if it in cat else {}
            if it in cat and not all(v is None for v in bl.values()):
                limits[it] = bl
    out: list[dict[str, Any]] = []
    for it in sorted(used):
        if it not in cat or quota.get(it, ZERO) != ZERO:
            continue
        if it not in limits:
            out.append({"instance_type": it, "count": None})
        elif _res(limits[it]) != ZERO:
            out.append(_limit_entry(cat[it], limits[it]))
    return out


def _own_quota(c: dict[str, Any], name: str, flavors: dict[str, str], cat: dict[str, InstanceType],
               notes: list[str]) -> dict[str, Res]:
    """A Cohort's own nominalQuota per instance type."""
    out: dict[str, Res] = {}
    spec = _map(c.get("spec"), f"Cohort {name}.spec")
    for gi, g in enumerate(_list(spec.get("resourceGroups"), f"Cohort {name}.spec.resourceGroups")):
        where = f"Cohort {name}.spec.resourceGroups[{gi}]"
        for fl in _list(_map(g, where).get("flavors"), f"{where}.flavors"):
            f = _map(fl, f"{where}.flavors[]")
            it = flavors.get(str(f.get("name")), str(f.get("name")))
            if it in cat:
                q = _res(_resources(f, f"Cohort {name} flavor {f.get('name')}", notes)["nominalQuota"])
                if q != ZERO:
                    out[it] = out.get(it, ZERO) + q
    return out


def _group_name(it: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", it.lower()).strip("-")[:36].strip("-") or "nodes"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    taken.add(name)
    return name


def from_kueue(objs: _Objects, notes: list[str], given: dict[str, str] | None = None) -> dict[str, Any]:
    """The spec the Kueue fields describe (no fairpod annotation read); ``given``: ``--flavor NAME=TYPE``."""
    flavors, custom, derived = _flavors(objs, notes, given or {})
    custom += _size_derived(objs, flavors, derived, notes)
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
        parents[_name(c)] = str(_map(c.get("spec"), f"Cohort {_name(c)}.spec").get("parentName") or "")
    for c in list(parents.values()):
        if c and c not in parents:
            parents[c] = ""  # a parent named but not defined: Kueue's default cohort
    in_cohort: dict[str, str] = {}
    for cq in objs.by_kind["ClusterQueue"]:
        s = _map(cq.get("spec"), "ClusterQueue.spec")
        c = s.get("cohortName") or s.get("cohort")
        if c:
            in_cohort[_name(cq)] = str(c)
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
        target = str(_map(lq.get("spec"), "LocalQueue.spec").get("clusterQueue") or "")
        queues.setdefault(target, []).append((str(lq["metadata"].get("namespace") or ""), _name(lq)))
    teams: list[dict[str, Any]] = []
    totals: dict[str, Res] = {}
    ranking_seen: list[bool] = []
    borrow_seen: list[tuple[str, int | None]] = []  # ClusterQueues with borrowWithinCohort LowerPriority
    unallocated = False
    for cq in objs.by_kind["ClusterQueue"]:
        labels = _map(cq["metadata"].get("labels"), "metadata.labels")
        if labels.get(K.ROLE_LABEL) == "unallocated" or _name(cq) == K.UNALLOCATED:
            unallocated = True
            _, nominal = _team(cq, K.UNALLOCATED, flavors, cat, [], [], derived)
        else:
            team, names = _team_of(cq, queues, notes)
            if any(t["name"] == team for t in teams):
                raise ImportError_(f"ClusterQueue {_name(cq)}: a second ClusterQueue for team {team}")
            t, nominal = _team(cq, team, flavors, cat, ranking_seen, notes, derived, borrow_seen)
            t.update(names)
            if in_cohort.get(_name(cq), root) != root:
                t["group"] = in_cohort[_name(cq)]
            teams.append(t)
            expected = K.local_queue(team)
            if not queues.get(_name(cq)):
                notes.append(f"team {team}: no LocalQueue in namespace {K.namespace(team)} points at ClusterQueue "
                             f"{_name(cq)} (jobs are submitted to {expected})")
        for it, q in nominal.items():
            totals[it] = totals.get(it, ZERO) + q
    classes = _priority_classes(objs, notes)
    if any(c["weight"] for c in classes):
        ranking_seen.append(True)
    owns = {_name(c): _own_quota(c, _name(c), flavors, cat, []) for c in objs.by_kind["Cohort"]}
    tree = [_group(c, name, parents, root, flavors, teams, cat, notes, owns)
            for c in objs.by_kind["Cohort"] if (name := _name(c)) != root]
    tree += [{"name": name} for name, parent in parents.items() if name != root and parent and
             not any(g["name"] == name for g in tree)]
    for g in tree:  # a Cohort's own nominalQuota is capacity too
        for e in g.get("quota", ()):
            it = e["instance_type"]
            totals[it] = totals.get(it, ZERO) + QuotaEntry.model_validate(e).resolve(cat[it])
    for c in objs.by_kind["Cohort"]:
        if _name(c) == root:  # the root's own quota: shared by every queue of the tree, fairpod's unallocated capacity
            for it, q in _own_quota(c, root, flavors, cat, notes).items():
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
    fungible = [_map(_map(cq.get("spec"), "ClusterQueue.spec").get("flavorFungibility"), "flavorFungibility")
                for cq in objs.by_kind["ClusterQueue"] if _name(cq) != K.UNALLOCATED]
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
        levels = [str(lv.get("nodeLabel")) for lv in (_map(topo.get("spec"), "Topology.spec").get("levels") or [])
                  if isinstance(lv, dict)]
        notes.append(f"Topology {_name(topo)} ({', '.join(levels)}): where each node sits is in the nodes' labels, "
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


def from_annotations(objs: _Objects) -> dict[str, Any] | None:
    """The spec fairpod's annotations describe, or None if one is missing."""
    cohorts = [c for c in objs.by_kind["Cohort"] if _ann(c, K.ANN_GROUP) is None]
    if len(cohorts) != 1:
        return None
    cluster, policy = _ann(cohorts[0], K.ANN_CLUSTER), _ann(cohorts[0], K.ANN_POLICY)
    tree = [_ann(c, K.ANN_GROUP) for c in objs.by_kind["Cohort"] if _ann(c, K.ANN_GROUP) is not None]
    teams = [_ann(cq, K.ANN_TEAM) for cq in objs.by_kind["ClusterQueue"]
             if (cq["metadata"].get("labels") or {}).get(K.ROLE_LABEL) != "unallocated"]
    classes = [_ann(w, K.ANN_PRIORITY_CLASS) for w in objs.by_kind["WorkloadPriorityClass"]]
    types = [_ann(f, K.ANN_INSTANCE_TYPE) for f in objs.by_kind["ResourceFlavor"]
             if _ann(f, K.ANN_INSTANCE_TYPE) is not None]
    parts = [cluster, policy, *teams, *classes, *tree]
    if any(not isinstance(p, dict) for p in parts) or any(not isinstance(t, dict) for t in types):
        return None
    return {"cluster": cluster, "instance_types": types, "policy": {**policy, "priority_classes": classes},
            **({"groups": tree} if tree else {}), "teams": teams}  # type: ignore[dict-item]


def import_kueue(docs: list[Any], flavors: dict[str, str] | None = None) -> Imported:
    """The spec of ``docs``; ``flavors``: ResourceFlavor name -> instance type (``--flavor NAME=TYPE``), which
    wins over what the objects say."""
    notes: list[str] = []
    objs = _Objects(docs, notes)
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
