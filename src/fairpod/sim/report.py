"""The simulation report: a JSON-ready dict of cluster, team, fairness and engine figures.

Definitions:
- ``makespan``: from the first submission to the last event (normally the last completion), in seconds.
- ``cluster.utilization``: allocated accelerator-seconds / (capacity x makespan). Allocated time counts every
  run, including work later lost to preemption; ``useful_utilization`` leaves the lost work out, and
  ``lost_share`` is lost / allocated accelerator-seconds.
- ``teams.<t>.used_accelerator_seconds``: sum over the team's jobs of accelerators x run time.
- ``borrowed``/``lent``: accelerators a team uses above its quota / others use of its idle quota, as
  ``governance.quota.lending`` attributes them, integrated over time.
- ``wait``: first start - submit, over the jobs that started; percentiles interpolate linearly.
- ``fairness.jain``: Jain's index (sum x)^2 / (n sum x^2) of x_t = used share / entitled share, where a team's
  used share is its used accelerator-seconds over all teams' and its entitled share is its quota (accelerators,
  all instance types) over the sum of all quotas. Teams with no quota or no jobs are left out. 1 means every
  team got exactly its quota's share of what was used.
- ``topology`` (a cluster with topology levels): per kind of request (required, preferred), the jobs that
  asked for a level, how many started, and the share of those whose last run was in one domain of the level
  (always 1 for required), with the mean number of domains.
- ``shrinks``/``grows`` (cluster, teams, engine): elastic jobs' Shrink and Grow decisions, counted apart from
  ``preemptions`` (a shrunk job keeps running); work lost to their restarts from a checkpoint is in ``lost``.
- ``kinds`` (cluster, teams): per kind of workload in the trace (job, service, ray): jobs, completed, never ran,
  preemptions, lost accelerator-seconds; for services also shrinks and grows and the replica-hours run at (up
  to) their minimum and above it (a service loses no work: see ``sim.run``).
- ``never_ran``: jobs that never started, each with its reason (why it can never run on this cluster, or its
  last Wait reason); ``unfinished``: jobs that started but never completed (empty unless the engine leaves
  a job pending on an empty cluster).
"""

from __future__ import annotations

from typing import Any

from fairpod import governance
from fairpod.governance.kinds import KINDS
from fairpod.sim.jobs import SimJob, SimResult

JAIN_DEFINITION = (
    "Jain's index of x_t = used share / entitled share over teams with quota and jobs; used share = team's "
    "used accelerator-seconds / all teams'; entitled share = team's quota accelerators / sum of all quotas"
)


def percentile(values: list[float], p: float) -> float | None:
    """The p-th percentile (0..100) with linear interpolation between closest ranks; None when empty."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def jain(xs: list[float]) -> float | None:
    sq = sum(x * x for x in xs)
    if not xs or sq == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * sq)


def _round(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _reason(sj: SimJob) -> str:
    """Why a job never ran (or never finished): its last Wait reason, else the engine's last word on it."""
    return sj.reason or (sj.w.reason if sj.w is not None else "") or "unknown"


def _team(res: SimResult, name: str, jobs: list[SimJob]) -> dict[str, Any]:
    waits = [w for w in (sj.wait for sj in jobs) if w is not None]
    out: dict[str, Any] = {
        "quota_accelerators": res.quota[name],
        "jobs": len(jobs),
        "completed": sum(1 for sj in jobs if sj.end is not None),
        "never_ran": sum(1 for sj in jobs if sj.first_start is None),
        "wait_mean": _round(sum(waits) / len(waits) if waits else None),
        "wait_p50": _round(percentile(waits, 50)),
        "wait_p95": _round(percentile(waits, 95)),
        "used_accelerator_seconds": _round(sum(sj.run_seconds * sj.job.accelerators for sj in jobs)),
        "borrowed_accelerator_seconds": _round(res.borrowed[name]),
        "lent_accelerator_seconds": _round(res.lent[name]),
        "preemptions": sum(sj.preemptions for sj in jobs),
        "shrinks": sum(sj.shrinks for sj in jobs),
        "grows": sum(sj.grows for sj in jobs),
        "lost_accelerator_seconds": _round(sum(sj.lost_seconds * sj.job.accelerators for sj in jobs)),
    }
    used = sum(sj.run_seconds * sj.job.accelerators for sj in jobs)
    lost = sum(sj.lost_seconds * sj.job.accelerators for sj in jobs)
    out["goodput"] = _round((used - lost) / used, 5) if used else None
    out["kinds"] = _kinds(jobs)
    return out


def _kinds(jobs: list[SimJob]) -> dict[str, Any]:
    """Figures per kind of workload present in ``jobs`` (see the module doc)."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        js = [sj for sj in jobs if sj.job.kind == kind]
        if not js:
            continue
        d: dict[str, Any] = {
            "jobs": len(js), "completed": sum(1 for sj in js if sj.end is not None),
            "never_ran": sum(1 for sj in js if sj.first_start is None),
            "preemptions": sum(sj.preemptions for sj in js),
            "lost_accelerator_seconds": _round(sum(sj.lost_seconds * sj.job.accelerators for sj in js))}
        if kind == "service":
            d["shrinks"] = sum(sj.shrinks for sj in js)
            d["grows"] = sum(sj.grows for sj in js)
            d["replica_hours_at_min"] = _round(sum(sj.at_min_seconds for sj in js) / 3600, 4)
            d["replica_hours_above_min"] = _round(sum(sj.above_min_seconds for sj in js) / 3600, 4)
        out[kind] = d
    return out


def _topology(jobs: list[SimJob]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, required in (("required", True), ("preferred", False)):
        asked = [sj for sj in jobs if sj.job.topology is not None and sj.job.topology_required == required]
        placed = [sj.domains for sj in asked if sj.domains is not None]
        out[kind] = {"jobs": len(asked), "started": len(placed),
                     "in_one_domain_share": _round(sum(1 for d in placed if d == 1) / len(placed), 4) if placed
                     else None,
                     "mean_domains": _round(sum(placed) / len(placed), 3) if placed else None}
    return out


def build_report(res: SimResult, *, timeline: bool = False, jobs: bool = False) -> dict[str, Any]:
    by_team: dict[str, list[SimJob]] = {n: [] for n in res.teams}
    for sj in res.jobs:
        by_team[sj.job.team].append(sj)
    teams = {n: _team(res, n, js) for n, js in by_team.items()}
    used_all = sum(t["used_accelerator_seconds"] for t in teams.values())
    quota_all = sum(res.quota.values())
    xs = []
    for n, t in teams.items():
        t["used_share"] = _round(t["used_accelerator_seconds"] / used_all if used_all else 0.0, 4)
        t["entitled_share"] = _round(res.quota[n] / quota_all if quota_all else 0.0, 4)
        if res.quota[n] > 0 and t["jobs"] and used_all:
            xs.append((t["used_accelerator_seconds"] / used_all) / (res.quota[n] / quota_all))
    span = res.makespan
    lost_all = sum(t["lost_accelerator_seconds"] for t in teams.values())
    report: dict[str, Any] = {
        "makespan": _round(span),
        "start": res.start,
        "end": res.end,
        "cluster": {
            "capacity_accelerators": res.capacity,
            "allocated_accelerator_seconds": _round(used_all),
            "utilization": _round(used_all / (res.capacity * span) if res.capacity and span else 0.0, 4),
            "jobs": len(res.jobs),
            "completed": sum(t["completed"] for t in teams.values()),
            "preemptions": res.preemptions,
            "shrinks": res.shrinks,
            "grows": res.grows,
            "max_preemptions_of_a_job": max((sj.preemptions for sj in res.jobs), default=0),
            "lost_accelerator_seconds": _round(lost_all),
            "lost_share": _round(lost_all / used_all if used_all else 0.0, 5),
            # goodput: the share of allocated accelerator-seconds whose progress was kept (fairpod.server.accounting.goodput)
            "goodput": _round((used_all - lost_all) / used_all, 5) if used_all else None,
            "useful_utilization": _round((used_all - lost_all) / (res.capacity * span)
                                         if res.capacity and span else 0.0, 4),
            "kinds": _kinds(res.jobs),
        },
        "teams": teams,
        "fairness": {"jain": _round(jain(xs), 4), "definition": JAIN_DEFINITION},
        "engine": {
            "cpu_seconds": _round(res.cpu_seconds, 4),
            "decisions": res.decisions,
            "cycles": res.cycles,
            "admits": res.admits,
            "preemptions": res.preemptions,
            "shrinks": res.shrinks,
            "grows": res.grows,
            "waits": res.waits,
            "decisions_per_cpu_second": _round(res.decisions / res.cpu_seconds if res.cpu_seconds else None, 1),
            "native": governance.is_native(),  # the engine compiled (``python -m fairpod.native build``), or Python
        },
        "never_ran": [{"name": sj.job.name, "team": sj.job.team, "reason": _reason(sj)}
                      for sj in res.jobs if sj.first_start is None],
        "unfinished": [{"name": sj.job.name, "team": sj.job.team, "reason": _reason(sj)}
                       for sj in res.jobs if sj.first_start is not None and sj.end is None],
    }
    if res.spec.cluster.topology_levels:
        report["topology"] = _topology(res.jobs)
    if timeline:
        report["timeline"] = [
            {"t": t, "allocated": dict(zip(res.teams, alloc, strict=True)),
             "borrowed": dict(zip(res.teams, borrowed, strict=True))}
            for t, alloc, borrowed in res.timeline
        ]
    if jobs:
        report["jobs"] = [
            {"name": sj.job.name, "team": sj.job.team, "accelerators": sj.job.accelerators,
             "nodes": sj.job.nodes, "submit": sj.job.submit, "start": sj.first_start, "end": sj.end,
             "wait": _round(sj.wait), "preemptions": sj.preemptions, "shrinks": sj.shrinks, "grows": sj.grows,
             "run_seconds": _round(sj.run_seconds), "lost_seconds": _round(sj.lost_seconds), "kind": sj.job.kind,
             **({"min_replicas": sj.job.min_replicas, "max_replicas": sj.job.nodes,
                 "replica_seconds_at_min": _round(sj.at_min_seconds),
                 "replica_seconds_above_min": _round(sj.above_min_seconds)} if sj.job.kind == "service" else {})}
            for sj in res.jobs
        ]
    return report
