"""Kueue's topology-aware scheduling (TAS) benchmark shape in the simulator.

The shape is read from ``../shared/kueue/perf/tas/generator.yaml`` (beside the checkout): one block of 10 racks
of 64 nodes (640 nodes of 96 CPU, 256 GiB), 5 cohorts x 6 ClusterQueues = 30 teams, each with a quota of 20 CPU
and a borrowing limit of 100 CPU, each submitting 500 workloads: small (2 pods x 500m, 200 ms), medium (4 x 1250m,
500 ms) and large (8 x 2500m, 1 s), a third each with a required, a preferred and a "balanced" rack constraint:
15,000 workloads. Kueue's CI mean for this shape: 401 s wall (rangespec.yaml).

How it maps onto fairpod: the counted resource is CPU in units of 250m (a node is 384 units; a 500m pod is 2),
so that fairpod's integer accelerators carry the CPU requests; each pod is one replica on its own node (Kueue
may put several pods of a workload on one node; with 64 nodes a rack that never decides a fit here). fairpod has
no cohorts: all 30 teams lend to and borrow from one pool (borrow limit 500 % of the quota). Priorities 50 / 100
/ 200 become priority-class weights 25 / 50 / 100 (TaskRanking). ``balanced`` (Kueue's TASBalancedPlacement,
which spreads a workload evenly over the fewest domains) has no fairpod counterpart: those workloads are run as
``preferred``, and reported as their own class.

Figures: makespan against the work bound (all work over all quota: borrowing is only from idle quota, so the
quota, not the 640 nodes, bounds the throughput), engine CPU (inside ``governance.schedule``), the share of
required- and preferred-topology jobs placed in one rack, and the mean wait per class next to Kueue's mean
time to admission.

``--no-topology`` runs the same jobs on the same nodes without topology levels (the engine's plain node best
fit), for the cost of topology-aware placement and the share of jobs that land in one rack without it.

Run: ``.venv/bin/python benchmarks/tas.py [--teams N] [--no-topology]`` (``--teams`` scales the shape down for
a quick run).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import yaml

from _kueue_shape import queues  # benchmarks/, this script's own folder
from fairpod.model.resources import by_ratio
from fairpod.model.spec import parse_spec
from fairpod.sim.report import build_report
from fairpod.sim.run import simulate
from fairpod.sim.trace import TraceJob

SHARED = Path(__file__).resolve().parents[2] / "shared" / "kueue" / "perf" / "tas"
KUEUE_WALL = 401.5  # s, mean of Kueue's CI runs (rangespec.yaml: 401472 ms)
WEIGHT = {50: 25, 100: 50, 200: 100}
UNIT_M = 250  # milli-CPU per counted unit


def cpu_units(text: str | int | float) -> int:
    """'500m' -> 2, '20' -> 80 (units of 250m)."""
    s = str(text)
    milli = int(s[:-1]) if s.endswith("m") else int(float(s) * 1000)
    assert milli % UNIT_M == 0, f"{s} is not a multiple of {UNIT_M}m"
    return milli // UNIT_M


def load_shape(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    levels = {lv["name"]: lv for lv in doc["topology"]["levels"]}
    node = levels["node"]
    teams, qs = queues(doc)
    return {"blocks": levels["block"]["count"], "racks": levels["rack"]["count"], "nodes": node["count"],
            "node_cpu": int(node["capacity"]["cpu"]), "node_gib": int(str(node["capacity"]["memory"]).rstrip("Gi")),
            "teams": teams, "quota": cpu_units(qs["nominalQuota"]), "borrow": cpu_units(qs["borrowingLimit"]),
            "sets": qs["workloadsSets"], "rack_label": levels["rack"]["nodeLabel"]}


def build(shape: dict[str, Any], teams: int, topology: bool = True) -> tuple[Any, list[TraceJob]]:
    node_units = shape["node_cpu"] * 1000 // UNIT_M
    groups = [{"name": f"b{b}-r{r}", "instance_type": "cpu96", "count": shape["nodes"],
               "topology": {"block": f"b{b}", "rack": f"b{b}-r{r}"}}
              for b in range(shape["blocks"]) for r in range(shape["racks"])]
    spec = parse_spec({
        "cluster": {"name": "tas", "topology_levels": ["block", "rack"] if topology else [],
                    "instance_groups": groups if topology else [{k: v for k, v in g.items() if k != "topology"}
                                                                for g in groups]},
        "instance_types": [{"name": "cpu96", "accelerators": node_units, "vcpu": shape["node_cpu"],
                            "memory_gib": shape["node_gib"]}],
        "policy": {"task_prioritization": "TaskRanking", "idle_compute_allocation": "FairShare",
                   "priority_classes": [{"name": f"p{p}", "weight": w} for p, w in WEIGHT.items()]},
        "teams": [{"name": f"cq{i:02d}", "fair_share_weight": 50,
                   "sharing": {"strategy": "LendAndBorrow",
                               "borrow_limit": min(500, max(1, 100 * shape["borrow"] // shape["quota"]))},
                   "quota": [{"instance_type": "cpu96", "accelerators": shape["quota"]}]} for i in range(teams)],
    })
    itype = spec.catalog()["cpu96"]
    level = shape["rack_label"]
    jobs: list[TraceJob] = []
    for i in range(teams):
        for s in shape["sets"]:
            for wl in s["workloads"]:
                assert wl["tasLevel"] == level, wl["tasLevel"]
                units = cpu_units(wl["request"])
                n = wl["podCount"]
                for k in range(s["count"]):
                    jobs.append(TraceJob(
                        name=f"cq{i:02d}-{wl['className']}-{k}", team=f"cq{i:02d}", itype="cpu96", nodes=n,
                        accelerators=units * n, per_replica=by_ratio(itype, units),
                        priority=WEIGHT[wl["priority"]], submit=round(k * s["creationIntervalMs"] / 1000, 6),
                        duration=wl["runtimeMs"] / 1000, topology="rack" if topology else None,
                        topology_required=topology and wl["tasConstraint"] == "required"))
    jobs.sort(key=lambda j: j.submit)
    return spec, jobs


def one_rack_share(res: Any, constraint: str) -> tuple[float, float]:
    """(share of the started jobs of a constraint class whose last run was in one rack, their mean racks), from
    the nodes they ran on (a node ``b0-r3-17`` is in rack ``b0-r3``): the same measure with and without
    topology-aware placement."""
    racks = [len({n.rsplit("-", 1)[0] for n in sj.nodes}) for sj in res.jobs
             if f"-{constraint}-rack-" in sj.job.name and sj.nodes]
    return sum(1 for r in racks if r == 1) / len(racks), sum(racks) / len(racks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", type=Path, default=SHARED / "generator.yaml")
    ap.add_argument("--teams", type=int, default=None, help="teams (default: the shape's 30)")
    ap.add_argument("--node-cpu", type=int, default=None,
                    help="CPU per node (default: the shape's 96); smaller nodes make the racks the bottleneck")
    ap.add_argument("--no-topology", action="store_true",
                    help="the same jobs on the same nodes without topology levels (plain node best fit), to compare")
    args = ap.parse_args()
    shape = load_shape(args.shape)
    if args.node_cpu:
        shape["node_gib"] = shape["node_gib"] * args.node_cpu // shape["node_cpu"] or 1
        shape["node_cpu"] = args.node_cpu
    teams = args.teams or shape["teams"]
    spec, jobs = build(shape, teams, topology=not args.no_topology)
    w0, c0 = time.perf_counter(), time.process_time()
    res = simulate(spec, jobs)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    r = build_report(res)
    work = sum(j.accelerators * j.duration for j in jobs) / (teams * shape["quota"])
    nodes = shape["blocks"] * shape["racks"] * shape["nodes"]
    e = r["engine"]
    print(("without topology levels: " if args.no_topology else "") + f"TAS shape: {nodes} nodes ({shape['racks']} "
          f"racks x {shape['nodes']}) of {shape['node_cpu']} CPU, {teams} teams x quota "
          f"{shape['quota'] * UNIT_M / 1000:g} CPU, {len(jobs)} jobs, work bound {work:.1f} s")
    print(f"  makespan          {r['makespan']:.1f} s   ({r['makespan'] / work:.2f} x the work bound; "
          f"Kueue CI mean wall {KUEUE_WALL:.0f} s)")
    print(f"  completed         {r['cluster']['completed']} of {len(jobs)}, preemptions {r['cluster']['preemptions']}")
    print(f"  engine cpu        {e['cpu_seconds']:.1f} s   ({e['decisions']} decisions, "
          f"{1e6 * e['cpu_seconds'] / max(1, e['decisions']):.0f} us each)")
    print(f"  process cpu       {cpu:.1f} s, wall {wall:.1f} s")
    for kind in ("required", "preferred", "balanced"):
        share, mean = one_rack_share(res, kind)
        print(f"  {kind:9} rack    in one rack: {share:.1%} of those started, mean racks {mean:.2f}")
    by_class: dict[str, list[float]] = {}
    for sj in res.jobs:
        cls = sj.job.name.split("-", 1)[1].rsplit("-", 1)[0]
        if sj.wait is not None:
            by_class.setdefault(cls, []).append(sj.wait)
    print("  mean wait per class (s):  " + ", ".join(
        f"{c} {sum(v) / len(v):.1f}" for c, v in sorted(by_class.items())))


if __name__ == "__main__":
    main()
