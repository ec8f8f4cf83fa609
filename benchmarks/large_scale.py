"""Kueue's large-scale scheduler benchmark shape in the simulator, and the engine's cost as teams grow.

The shape is read from ``../shared/kueue/perf/large-scale/generator.yaml`` (beside the checkout): 10 cohorts x
100 ClusterQueues = 1,000 teams, each with a quota of 20 accelerators and a borrowing limit of 100 (500 % of
the quota), each submitting 35 small (1 accelerator, 150 ms, every 60 ms), 11 medium (5, 350 ms, every
300 ms) and 4 large (20, 700 ms, every 700 ms) jobs: 50,000 jobs. The cluster is 1,000 nodes of a custom
20-accelerator type, so each team's quota is one node's worth; the work bound is ~4 s. fairpod has no
cohorts: all teams lend to and borrow from one pool. Kueue's priorities 50/100/200 become priority-class
weights 25/50/100 (a spec's range is 0..100). Kueue's CI mean for this shape: 1,179 s wall.

``--curve`` then prints engine CPU per decision for 10, 100, 1,000 and 5,000 teams (one node each, the same
job mix, ``--jobs-per-team`` jobs each) and for 100 teams on 100, 1,000 and 10,000 nodes.

Run: ``.venv/bin/python benchmarks/large_scale.py [--curve] [--jobs-per-team N]``. Target: engine CPU
<= 5 s for the large-scale shape, and CPU per decision flat as teams grow.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import yaml

from _kueue_shape import queues  # benchmarks/, this script's own folder
from fairpod.model.resources import Res
from fairpod.model.spec import parse_spec
from fairpod.sim.report import build_report
from fairpod.sim.run import simulate
from fairpod.sim.trace import TraceJob

SHARED = Path(__file__).resolve().parents[2] / "shared" / "kueue" / "perf" / "large-scale"
KUEUE_WALL = 1179.4  # s, mean of Kueue's CI runs (rangespec.yaml)
WEIGHT = {50: 25, 100: 50, 200: 100}
NODE_ACC = 20


def load_shape(path: Path) -> tuple[int, int, int, list[dict[str, Any]]]:
    """(teams, quota, borrowing limit, workload sets) of the generator file."""
    teams, qs = queues(yaml.safe_load(path.read_text()))
    return teams, qs["nominalQuota"], qs["borrowingLimit"], qs["workloadsSets"]


def build(teams: int, nodes: int, quota: int, borrow: int, sets: list[dict[str, Any]],
          per_team: int | None = None) -> tuple[Any, list[TraceJob]]:
    spec = parse_spec({
        "cluster": {"name": "large-scale",
                    "instance_groups": [{"name": "u", "instance_type": "unit20", "count": nodes}]},
        "instance_types": [{"name": "unit20", "accelerators": NODE_ACC, "vcpu": 64, "memory_gib": 256}],
        "policy": {"task_prioritization": "TaskRanking", "idle_compute_allocation": "FairShare",
                   "priority_classes": [{"name": f"p{p}", "weight": w} for p, w in WEIGHT.items()]},
        "teams": [{"name": f"cq{i:04d}", "fair_share_weight": 50,
                   "sharing": {"strategy": "LendAndBorrow", "borrow_limit": min(500, max(1, 100 * borrow // quota))},
                   "quota": [{"instance_type": "unit20", "accelerators": quota}]} for i in range(teams)],
    })
    total = sum(s["count"] for s in sets)
    jobs: list[TraceJob] = []
    for i in range(teams):
        for s in sets:
            n = s["count"] if per_team is None else max(1, round(s["count"] * per_team / total))
            for wl in s["workloads"]:
                acc = wl["request"]
                for k in range(n):
                    jobs.append(TraceJob(
                        name=f"cq{i:04d}-{wl['className']}-{k}", team=f"cq{i:04d}", itype="unit20", nodes=1,
                        accelerators=acc, per_replica=Res(acc, 3200 * acc, 12800 * acc),
                        priority=WEIGHT[wl["priority"]], submit=round(k * s["creationIntervalMs"] / 1000, 6),
                        duration=wl["runtimeMs"] / 1000))
    jobs.sort(key=lambda j: j.submit)
    return spec, jobs


def run(spec: Any, jobs: list[TraceJob]) -> tuple[dict[str, Any], float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    r = build_report(simulate(spec, jobs))
    return r, time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", type=Path, default=SHARED / "generator.yaml")
    ap.add_argument("--curve", action="store_true", help="also print the team- and node-scaling curves")
    ap.add_argument("--skip-shape", action="store_true", help="only the curves")
    ap.add_argument("--jobs-per-team", type=int, default=10, help="jobs per team in the curves (default 10)")
    args = ap.parse_args()
    teams, quota, borrow, sets = load_shape(args.shape)
    if not args.skip_shape:
        spec, jobs = build(teams, teams * quota // NODE_ACC, quota, borrow, sets)
        r, wall, cpu = run(spec, jobs)
        work = sum(j.accelerators * j.duration for j in jobs) / (teams * quota)
        e, c = r["engine"], r["cluster"]
        print(f"large-scale shape: {teams} teams x quota {quota}, {len(jobs)} jobs, work bound {work:.1f} s")
        print(f"  makespan          {r['makespan']:.1f} s   (Kueue CI mean wall {KUEUE_WALL:.0f} s)")
        print(f"  utilization       {c['utilization']:.1%}")
        print(f"  engine cpu        {e['cpu_seconds']:.1f} s   (target <= 5 s; {e['decisions']} decisions, "
              f"{1e6 * e['cpu_seconds'] / max(1, e['decisions']):.0f} us each)")
        print(f"  process cpu       {cpu:.1f} s, wall {wall:.1f} s")
    if args.curve:
        print(f"{'teams':>6} {'nodes':>6} {'jobs':>7} {'decisions':>9} {'engine cpu':>10} {'us/decision':>11}")
        for t, n in [(10, 10), (100, 100), (1000, 1000), (5000, 5000), (100, 1000), (100, 10000)]:
            q = n * NODE_ACC // t
            spec, jobs = build(t, n, q, borrow * q // quota, sets, args.jobs_per_team)
            r, _, _ = run(spec, jobs)
            e = r["engine"]
            print(f"{t:6d} {n:6d} {len(jobs):7d} {e['decisions']:9d} {e['cpu_seconds']:9.2f}s "
                  f"{1e6 * e['cpu_seconds'] / max(1, e['decisions']):11.0f}")


if __name__ == "__main__":
    main()
