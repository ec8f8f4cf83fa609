"""Kueue ``ClusterQueue``s (with the ``LocalQueue``s that point at them) read into fairpod teams
(fairpod.formats.kube.importer): the team, its namespaces and queue names, quota, sharing strategy and limits,
preemption, fair-share weight; and ``WorkloadPriorityClass``es into priority classes."""

from __future__ import annotations

import re
from typing import Any

from fairpod.formats.kube import kueue as K
from fairpod.formats.kube.export import borrowing_limit
from fairpod.formats.kube.kueue_flavors import flavor_resources, limit_entry, quota_entry, res_of
from fairpod.formats.kube.kueue_objects import ImportError_, Objects, as_list, as_map, name_of, qty
from fairpod.model.catalog import BUILTIN_INSTANCE_TYPES, InstanceType
from fairpod.model.resources import ZERO, Res
from fairpod.model.spec import NAME_PATTERN


def lend_and_borrow(what: str, with_quota: list[tuple[Any, Any]], notes: list[str]) -> dict[str, Any]:
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


def team_of_queue(cq: dict[str, Any], queues: dict[str, list[tuple[str, str]]], notes: list[str]
             ) -> tuple[str, dict[str, list[str]]]:
    """The team of a ClusterQueue, and the namespaces and LocalQueue names its jobs use when they are not
    HyperPod's for the team (the spec's ``namespaces``/``local_queues``). HyperPod's names say the team; else the
    ClusterQueue's name is the team's (Kueue's samples: ``cluster-queue`` with a LocalQueue ``user-queue``)."""
    name = name_of(cq)
    lqs = queues.get(name, [])
    sel = as_map(as_map(cq.get("spec"), "spec").get("namespaceSelector"), "namespaceSelector")
    picked = as_map(sel.get("matchLabels"), "namespaceSelector.matchLabels").get(K.NS_LABEL)
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


def read_team(cq: dict[str, Any], team: str, flavors: dict[str, str], cat: dict[str, InstanceType],
          ranking_seen: list[bool], notes: list[str], derived: frozenset[str] | set[str] = frozenset(),
          borrow_seen: list[tuple[str, int | None]] | None = None) -> tuple[dict[str, Any], dict[str, Res]]:
    name = name_of(cq)
    spec = as_map(cq.get("spec"), f"ClusterQueue {name}.spec")
    quota: list[dict[str, Any]] = []
    nominal: dict[str, Res] = {}
    lend_zero: list[bool] = []
    borrow: list[tuple[Res, Res | None]] = []
    lend_limits: list[dict[str, Any]] = []
    only_borrows: list[dict[str, Any]] = []
    for gi, g in enumerate(as_list(spec.get("resourceGroups"), f"ClusterQueue {name}.spec.resourceGroups")):
        where = f"ClusterQueue {name}.spec.resourceGroups[{gi}]"
        for fl in as_list(as_map(g, where).get("flavors"), f"{where}.flavors"):
            f = as_map(fl, f"{where}.flavors[]")
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
            r = flavor_resources(f, fwhere, notes)
            quota.append(quota_entry(cat[it], r["nominalQuota"], units=it in derived))
            q = res_of(r["nominalQuota"])
            nominal[it] = q
            ll = [v for v in r["lendingLimit"].values() if v is not None]
            lend_zero.append(bool(ll) and all(v == 0 for v in ll))
            if ll and not all(v == 0 for v in ll) and res_of(r["lendingLimit"]) != q:
                lend_limits.append(limit_entry(cat[it], r["lendingLimit"]))  # a lending limit (docs/policies.md)
            bl = r["borrowingLimit"]
            borrow.append((q, None if all(v is None for v in bl.values()) else res_of(bl)))
            if q == ZERO and borrow[-1][1] is None:  # it only borrows, without limit: the type's whole capacity
                only_borrows.append({"instance_type": it, "count": None})  # (``from_kueue`` sizes it)
            elif q == ZERO and borrow[-1][1] != ZERO:  # a type it only borrows: an absolute borrow limit
                only_borrows.append(limit_entry(cat[it], bl))
    sharing: dict[str, Any]
    with_quota = [(q, b) for q, b in borrow if q != ZERO]
    if only_borrows and (spec.get("cohortName") or spec.get("cohort")) and not (lend_zero and all(lend_zero)):
        sharing = lend_and_borrow(f"ClusterQueue {name}", with_quota, notes) if with_quota else \
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
        sharing = lend_and_borrow(f"ClusterQueue {name}", with_quota, notes)
    if lend_limits and sharing["strategy"] != "DontLend":
        sharing["lending_limits"] = lend_limits
    pre = as_map(spec.get("preemption"), f"ClusterQueue {name}.spec.preemption")
    within = str(pre.get("withinClusterQueue") or "Never")
    if within != "Never":
        ranking_seen.append(True)
    reclaim = str(pre.get("reclaimWithinCohort") or "Never")
    if reclaim != "Any" and spec.get("cohortName", spec.get("cohort")):
        notes.append(f"ClusterQueue {name}: reclaimWithinCohort {reclaim}: fairpod always takes a team's quota "
                     "back from any borrower (Any)")
    bwc_spec = as_map(pre.get("borrowWithinCohort"), "borrowWithinCohort")
    bwc = str(bwc_spec.get("policy") or "Never")
    if bwc == "LowerPriority" and borrow_seen is not None:  # policy.preempt_to_borrow (the spec's, for every team)
        mpt = bwc_spec.get("maxPriorityThreshold")
        borrow_seen.append((name, None if mpt is None else round(qty(
            mpt, f"ClusterQueue {name}.spec.preemption.borrowWithinCohort.maxPriorityThreshold"))))
    elif bwc != "Never":
        notes.append(f"ClusterQueue {name}: borrowWithinCohort {bwc}: not a policy fairpod knows; read as Never")
    fs = as_map(spec.get("fairSharing"), "fairSharing")
    if fs.get("weight") is None:
        weight = 1
        notes.append(f"ClusterQueue {name}: no fairSharing.weight; read as Kueue's default, 1")
    else:
        w = qty(fs["weight"], f"ClusterQueue {name}.spec.fairSharing.weight")
        weight = min(100, max(0, round(w)))
        if weight != w:
            notes.append(f"ClusterQueue {name}: fairSharing.weight {fs['weight']} read as {weight} (fairpod's "
                         "weights are whole numbers 0..100)")
    out = {"name": team, "fair_share_weight": weight,
           "preempt_team_tasks": within if within in ("Never", "LowerOrNewerEqualPriority") else "LowerPriority",
           "sharing": sharing, "quota": quota}
    return out, nominal


def priority_classes(objs: Objects, notes: list[str]) -> list[dict[str, Any]]:
    """The WorkloadPriorityClasses as fairpod priority classes: their values as weights when all are 0..100, else
    spread over 0..100 in the same order (equal values equal weights); a name's ``-priority`` is dropped."""
    read: list[tuple[str, int]] = []
    for wpc in objs.by_kind["WorkloadPriorityClass"]:
        wname = name_of(wpc)
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
