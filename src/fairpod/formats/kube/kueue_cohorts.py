"""Kueue ``Cohort``s read into fairpod groups (fairpod.formats.kube.importer): the tree below the root cohort,
each group's parent, weight, own quota and the sharing its borrowing and lending limits give."""

from __future__ import annotations

from typing import Any

from fairpod.formats.kube.kueue_flavors import flavor_resources, limit_entry, quota_entry, res_of
from fairpod.formats.kube.kueue_objects import as_list, as_map, qty
from fairpod.formats.kube.kueue_queues import lend_and_borrow
from fairpod.model.catalog import InstanceType
from fairpod.model.resources import ZERO, Res
from fairpod.model.spec import QuotaEntry


def _ancestors(c: str, parents: dict[str, str]) -> set[str]:
    out: set[str] = set()
    while parents.get(c) and parents[c] not in out:
        c = parents[c]
        out.add(c)
    return out


def read_group(c: dict[str, Any], name: str, parents: dict[str, str], root: str, flavors: dict[str, str],
           teams: list[dict[str, Any]], cat: dict[str, InstanceType], notes: list[str],
           owns: dict[str, dict[str, Res]] | None = None) -> dict[str, Any]:
    """A Cohort below the root as a group: parent, weight, and the sharing its borrowing and lending limits give,
    against the quota of the ClusterQueues below it."""
    spec = as_map(c.get("spec"), f"Cohort {name}.spec")
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
    for gi, g in enumerate(as_list(spec.get("resourceGroups"), f"Cohort {name}.spec.resourceGroups")):
        where = f"Cohort {name}.spec.resourceGroups[{gi}]"
        for fl in as_list(as_map(g, where).get("flavors"), f"{where}.flavors"):
            f = as_map(fl, f"{where}.flavors[]")
            it = flavors.get(str(f.get("name")), str(f.get("name")))
            if it not in cat:
                continue
            r = flavor_resources(f, f"Cohort {name} flavor {f.get('name')}", notes)
            q = quota.get(it, ZERO)
            if res_of(r["nominalQuota"]) != ZERO:  # quota the group holds itself, shared by everyone below it
                own.append(quota_entry(cat[it], r["nominalQuota"]))
                q = q + res_of(r["nominalQuota"])
            ll = [v for v in r["lendingLimit"].values() if v is not None]
            lend_zero.append(bool(ll) and all(v == 0 for v in ll))
            if ll and not all(v == 0 for v in ll):
                lend_limits.append(limit_entry(cat[it], r["lendingLimit"]))
            bl = r["borrowingLimit"]
            borrow.append((q, None if all(v is None for v in bl.values()) else res_of(bl)))
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
        sharing = lend_and_borrow(f"Cohort {name}", with_quota, notes)
    if lend_limits and sharing["strategy"] != "DontLend":
        sharing["lending_limits"] = lend_limits
    fs = as_map(spec.get("fairSharing"), "fairSharing")
    weight = 1 if fs.get("weight") is None else min(100, max(0, round(
        qty(fs["weight"], f"Cohort {name}.spec.fairSharing.weight"))))
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
    for g in as_list(spec.get("resourceGroups"), f"Cohort {name}.spec.resourceGroups"):
        for fl in as_list(as_map(g, f"Cohort {name}.spec.resourceGroups[]").get("flavors"), "flavors"):
            f = as_map(fl, f"Cohort {name}.spec.resourceGroups[].flavors[]")
            it = flavors.get(str(f.get("name")), str(f.get("name")))
            bl = flavor_resources(f, f"Cohort {name} flavor {f.get('name')}", notes)["borrowingLimit"] if it in cat else {}
            if it in cat and not all(v is None for v in bl.values()):
                limits[it] = bl
    out: list[dict[str, Any]] = []
    for it in sorted(used):
        if it not in cat or quota.get(it, ZERO) != ZERO:
            continue
        if it not in limits:
            out.append({"instance_type": it, "count": None})
        elif res_of(limits[it]) != ZERO:
            out.append(limit_entry(cat[it], limits[it]))
    return out


def own_quota(c: dict[str, Any], name: str, flavors: dict[str, str], cat: dict[str, InstanceType],
               notes: list[str]) -> dict[str, Res]:
    """A Cohort's own nominalQuota per instance type."""
    out: dict[str, Res] = {}
    spec = as_map(c.get("spec"), f"Cohort {name}.spec")
    for gi, g in enumerate(as_list(spec.get("resourceGroups"), f"Cohort {name}.spec.resourceGroups")):
        where = f"Cohort {name}.spec.resourceGroups[{gi}]"
        for fl in as_list(as_map(g, where).get("flavors"), f"{where}.flavors"):
            f = as_map(fl, f"{where}.flavors[]")
            it = flavors.get(str(f.get("name")), str(f.get("name")))
            if it in cat:
                q = res_of(flavor_resources(f, f"Cohort {name} flavor {f.get('name')}", notes)["nominalQuota"])
                if q != ZERO:
                    out[it] = out.get(it, ZERO) + q
    return out
