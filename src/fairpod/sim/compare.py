"""Does sharing pay, per team? The same trace replayed under other rules, side by side.

- ``private``: every team on its own quota slice (DontLend everywhere: nobody lends, nobody borrows).
- ``fcfs``: one global first-come-first-served queue over the whole cluster (one team owning everything):
  the work-conserving bound for utilization.
- ``history``: the same cluster with the other fair share for idle capacity: FairShareHistory (decayed past
  borrowing, ``policy.fair_share_half_life_seconds``) when the spec has FairShare or FirstComeFirstServe,
  FairShare when it has FairShareHistory; per team the change of mean wait and JCT.

Per team: mean wait and mean job completion time (JCT = end - submit) under each, and
rho = mean JCT (shared) / mean JCT (private), Themis' finish-time fairness: rho > 1 means the team loses by
sharing (a *sharing anomaly*). rho is taken over the jobs that completed in both runs, so a job that cannot
run on its team's private slice (larger than its quota) does not skew it; those are counted in
``private.never_ran``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fairpod.model.spec import ClusterSpec, parse_spec
from fairpod.sim.jobs import SimResult
from fairpod.sim.run import simulate
from fairpod.sim.trace import TraceJob

MODES = ("private", "fcfs", "history")
ANOMALY = 1.05  # rho above this: the team loses by sharing


def private_spec(spec: ClusterSpec) -> ClusterSpec:
    doc = spec.model_dump(mode="json")
    for t in doc["teams"]:
        t["sharing"]["strategy"] = "DontLend"
    return parse_spec(doc)


FCFS_TEAM = "all-teams"


def fcfs_spec(spec: ClusterSpec) -> ClusterSpec:
    doc = spec.model_dump(mode="json")
    counts: dict[str, int] = {}
    for g in spec.cluster.instance_groups:
        counts[g.node_type] = counts.get(g.node_type, 0) + g.count
    doc["policy"]["task_prioritization"] = "FirstComeFirstServe"
    doc["teams"] = [{"name": FCFS_TEAM, "fair_share_weight": 1, "sharing": {"strategy": "DontLend"},
                     "quota": [{"instance_type": it, "count": n} for it, n in sorted(counts.items())]}]
    return parse_spec(doc)


def history_spec(spec: ClusterSpec) -> ClusterSpec:
    """The spec with the other fair share: FairShareHistory, or FairShare if it has FairShareHistory already."""
    doc = spec.model_dump(mode="json")
    alloc = doc["policy"]["idle_compute_allocation"]
    doc["policy"]["idle_compute_allocation"] = "FairShare" if alloc == "FairShareHistory" else "FairShareHistory"
    return parse_spec(doc)


def _done(res: SimResult) -> dict[str, tuple[str, float, float]]:
    """job name -> (team, wait, JCT) for the jobs that completed."""
    return {sj.job.name: (sj.job.team, sj.first_start - sj.job.submit, sj.end - sj.job.submit)  # type: ignore[operator]
            for sj in res.jobs if sj.end is not None and sj.first_start is not None}


def _means(done: dict[str, tuple[str, float, float]], names: list[str]) -> dict[str, Any]:
    n = len(names)
    return {"jobs": n,
            "wait_mean": round(sum(done[j][1] for j in names) / n, 1) if n else None,
            "jct_mean": round(sum(done[j][2] for j in names) / n, 1) if n else None}


def compare(spec: ClusterSpec, jobs: list[TraceJob], modes: list[str],
            shared: SimResult | None = None, cadence: float = 0.0) -> dict[str, Any]:
    """The comparison section of a report (see the module doc); ``shared`` is the run under ``spec`` if done;
    ``cadence``: every run's (``run.simulate``).

    Utilization is useful (not lost) accelerator-seconds / (capacity x the run's makespan): work a run could not
    do (jobs too large for a private quota) and work lost to preemption count against it.
    """
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"unknown comparison {mode!r} (valid: {', '.join(MODES)})")
    runs: dict[str, SimResult] = {"shared": shared or simulate(spec, jobs, cadence=cadence)}
    if "private" in modes:
        runs["private"] = simulate(private_spec(spec), jobs, cadence=cadence)
    if "history" in modes:
        runs["history"] = simulate(history_spec(spec), jobs, cadence=cadence)
    if "fcfs" in modes:
        team_of = {j.name: j.team for j in jobs}
        res = simulate(fcfs_spec(spec), [replace(j, team=FCFS_TEAM) for j in jobs], cadence=cadence)
        for sj in res.jobs:  # back to the teams they came from
            sj.job = replace(sj.job, team=team_of[sj.job.name])
        runs["fcfs"] = res
    cap = runs["shared"].capacity
    out: dict[str, Any] = {}
    done = {m: _done(r) for m, r in runs.items()}
    for m, r in runs.items():
        useful = sum((sj.run_seconds - sj.lost_seconds) * sj.job.accelerators for sj in r.jobs)
        out[m] = {"makespan": round(r.makespan, 3), "completed": len(done[m]),
                  "utilization": round(useful / (cap * r.makespan), 4) if cap and r.makespan else 0.0}
    teams: dict[str, dict[str, Any]] = {}
    for t in (t.name for t in spec.teams):
        row: dict[str, Any] = {}
        for m in runs:
            row[m] = _means(done[m], [j for j, v in done[m].items() if v[0] == t])
        if "private" in runs:
            row["private"]["never_ran"] = sum(1 for sj in runs["private"].jobs if sj.job.team == t and sj.end is None)
            both = [j for j, v in done["shared"].items() if v[0] == t and j in done["private"]]
            js = sum(done["shared"][j][2] for j in both)
            jp = sum(done["private"][j][2] for j in both)
            row["rho"] = round(js / jp, 4) if both and jp > 0 else None
            row["rho_jobs"] = len(both)
        teams[t] = row
    out["teams"] = teams
    if "history" in runs:
        out["history"]["idle_compute_allocation"] = history_spec(spec).policy.idle_compute_allocation.value
        out["history"]["half_life_seconds"] = spec.policy.fair_share_half_life_seconds
    out["verdict"] = verdict(out)
    return out


def verdict(cmp: dict[str, Any]) -> list[str]:
    """Plain sentences: which teams lose by sharing and by how much, and utilization against the bounds."""
    lines = []
    losers = {t: r["rho"] for t, r in cmp["teams"].items() if r.get("rho") is not None and r["rho"] > ANOMALY}
    if "private" in cmp:
        for t, rho in sorted(losers.items(), key=lambda x: -x[1]):
            lines.append(f"team {t} loses by sharing: its jobs take {rho:.2f}x as long as on its private quota "
                         f"({rho - 1:.0%} longer)")
        if not losers:
            rhos = [r["rho"] for r in cmp["teams"].values() if r.get("rho") is not None]
            worst = max(rhos, default=None)
            lines.append("no team loses by sharing" + (f" (highest rho {worst:.2f})" if worst is not None else ""))
        for t, r in cmp["teams"].items():
            if r["private"].get("never_ran"):
                lines.append(f"team {t} needs sharing: {r['private']['never_ran']} of its jobs cannot run on its "
                             "private quota at all")
        lines.append(f"utilization {cmp['shared']['utilization']:.1%} shared vs {cmp['private']['utilization']:.1%} "
                     "on private quotas")
    if "history" in cmp:
        other = cmp["history"]["idle_compute_allocation"]
        for t, r in cmp["teams"].items():
            a, b = r["shared"].get("wait_mean"), r["history"].get("wait_mean")
            if a is not None and b is not None and abs(b - a) >= 60:
                lines.append(f"under {other}, team {t} waits {abs(b - a) / 3600:.2f} h "
                             f"{'longer' if b > a else 'less'} on average ({a / 3600:.2f} h -> {b / 3600:.2f} h)")
        if not any(line.startswith(f"under {other}") for line in lines):
            lines.append(f"under {other} no team's mean wait changes by a minute or more")
    if "fcfs" in cmp:
        bound = cmp["fcfs"]["utilization"]
        mine = cmp["shared"]["utilization"]
        ratio = mine / bound if bound else 0.0
        lines.append(f"utilization {mine:.1%} shared vs {bound:.1%} under one global FCFS queue "
                     f"({ratio:.0%} of that bound)")
    return lines
