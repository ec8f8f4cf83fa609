"""Kueue ``ResourceFlavor``s read into fairpod instance types (fairpod.formats.kube.importer), and a flavor's
resources (nominal quota, borrowing and lending limits) as quota entries of its instance type."""

from __future__ import annotations

import re
from typing import Any

from fairpod.formats.kube import kueue as K
from fairpod.formats.kube.kueue_objects import (
    ImportError_,
    Objects,
    annotation,
    as_list,
    as_map,
    name_of,
    qty,
)
from fairpod.model.catalog import BUILTIN_INSTANCE_TYPES, InstanceType
from fairpod.model.resources import ZERO, Res, node_res

# -- reading the Kueue fields --------------------------------------------------------------------------------


def _catalog_type(label: str) -> str | None:
    """The catalog's instance type of a node label's value: itself, or SageMaker's ``ml.`` name of an EC2 type
    (EKS nodes are labelled ``p4d.24xlarge``)."""
    return next((t for t in (label, f"ml.{label}") if t in BUILTIN_INSTANCE_TYPES), None)


def read_flavors(objs: Objects, notes: list[str], given: dict[str, str]
             ) -> tuple[dict[str, str], list[dict[str, Any]], set[str]]:
    """ResourceFlavor name -> instance type; the custom instance types, in file order; and the flavors that name
    no instance type, each read as a node type of its own (sized from the quotas by ``size_derived``).

    A flavor's instance type is, in order: ``--flavor NAME=TYPE``; its ``node.kubernetes.io/instance-type`` node
    label; its own name when that is an instance type fairpod knows; else a type of its own."""
    out: dict[str, str] = {}
    custom: list[dict[str, Any]] = []
    derived: set[str] = set()
    for rf in objs.by_kind["ResourceFlavor"]:
        fname = name_of(rf)
        labels = as_map(as_map(rf.get("spec"), f"ResourceFlavor {fname}.spec").get("nodeLabels"),
                      f"ResourceFlavor {fname}.spec.nodeLabels")
        label = next((str(labels[k]) for k in K.INSTANCE_LABELS if k in labels), None)
        it = given.get(fname) or label
        if it is not None and it not in BUILTIN_INSTANCE_TYPES and annotation(rf, K.ANN_INSTANCE_TYPE) is None:
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
            ann = annotation(rf, K.ANN_INSTANCE_TYPE)
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


def size_derived(objs: Objects, flavors: dict[str, str], derived: set[str], notes: list[str]
                  ) -> list[dict[str, Any]]:
    """A node type for each flavor that names no instance type: the largest quota one ClusterQueue gives it (so
    that each team's quota is vCPU, memory and accelerators of it); what no queue gives, 1 vCPU or 1 GiB."""
    out = []
    for fname, it in flavors.items():
        if it not in derived:
            continue
        top = {"acc": 0.0, "cpu": 0.0, "mem": 0.0}
        for cq in objs.by_kind["ClusterQueue"]:
            for g in as_list(as_map(cq.get("spec"), "spec").get("resourceGroups"), "resourceGroups"):
                for f in as_list(as_map(g, "resourceGroup").get("flavors"), "flavors"):
                    if isinstance(f, dict) and str(f.get("name")) == fname:
                        r = flavor_resources(f, f"ClusterQueue {name_of(cq)} flavor {fname}", [])["nominalQuota"]
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


def flavor_resources(flavor: dict[str, Any], where: str, notes: list[str]) -> dict[str, dict[str, float | None]]:
    """{nominalQuota|borrowingLimit|lendingLimit: {acc, cpu, mem}} of one flavor (None: not set)."""
    out: dict[str, dict[str, float | None]] = {f: {"acc": None, "cpu": None, "mem": None}
                                               for f in ("nominalQuota", "borrowingLimit", "lendingLimit")}
    ignored = []
    for r in as_list(flavor.get("resources"), f"{where}.resources"):
        r = as_map(r, where)
        rname = str(r.get("name"))
        dim = "acc" if rname in K.ACCEL_RESOURCES else "cpu" if rname == K.CPU else "mem" if rname == K.MEMORY \
            else None
        if dim is None:
            ignored.append(rname)
            continue
        for f in out:
            if r.get(f) is not None:
                v = qty(r[f], f"{where} {rname}.{f}")
                if dim == "cpu":
                    v = round(v * 1000)
                elif dim == "mem":
                    v = round(v / 2**20)
                prev = out[f][dim]
                out[f][dim] = v if prev is None else prev + v
    if ignored:
        notes.append(f"{where}: {', '.join(ignored)} not known to fairpod (accelerators, cpu, memory); ignored")
    return out


def res_of(d: dict[str, float | None]) -> Res:
    return Res(int(d["acc"] or 0), int(d["cpu"] or 0), int(d["mem"] or 0))


def quota_entry(it: InstanceType, d: dict[str, float | None], units: bool = False) -> dict[str, Any]:
    """A team's quota of ``it``: a node count where the quota is whole nodes (unless ``units``), else accelerators,
    vCPU and memory."""
    q = res_of(d)
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


def limit_entry(it: InstanceType, d: dict[str, float | None]) -> dict[str, Any]:
    """A lending or absolute borrow limit of one flavor: one unit (whole nodes, else accelerators, vCPU or memory);
    the others follow the type's ratio."""
    entry = quota_entry(it, d)
    if "count" not in entry:
        unit = next(k for k in ("accelerators", "vcpu", "memory_gib") if k in entry)
        entry = {"instance_type": entry["instance_type"], unit: entry[unit]}
    return entry
