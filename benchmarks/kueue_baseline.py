"""Kueue's scheduling benchmark shape, replayed with ``fairpod simulate``'s code path.

30 teams, each with a quota of 20 accelerators, share 30 nodes of a custom 20-accelerator type
(``unit20``: 20 accelerators, 64 vCPU, 256 GiB) and may borrow up to 500 % of their quota. At t=0 every team
submits 350 jobs of 1 accelerator for 0.2 s (priority 50), 100 jobs of 5 accelerators for 0.5 s (priority 100)
and 50 jobs of 20 accelerators (one whole node) for 1 s (priority 200): 15,000 jobs, 39,600
accelerator-seconds on 600 accelerators, so no schedule can finish before 66 s.

Kueue's priorities (50, 100, 200) do not fit a spec's weight range 0..100, so the classes p50, p100 and p200
get weights 25, 50 and 100 (halved: the same order and the same ratios). Policy: TaskRanking (a team may
preempt its own lower-priority jobs), FairShare for idle capacity, every team weight 50.

Run: ``.venv/bin/python benchmarks/kueue_baseline.py [--keep DIR]``. Targets: makespan <= 73 s, engine CPU
<= 1.5 s (>= 10,000 decisions per CPU second).
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

import yaml

from fairpod.sim import replay

TEAMS = 30
SHAPES = [  # (jobs per team, accelerators, seconds, priority class)
    (350, 1, 0.2, "p50"),
    (100, 5, 0.5, "p100"),
    (50, 20, 1.0, "p200"),
]
KUEUE = {"makespan": 351.0, "utilization": 0.559}  # Kueue's published run of the same shape
PHYSICAL_LIMIT = TEAMS * sum(n * acc * s for n, acc, s, _ in SHAPES) / (TEAMS * 20)


def spec() -> dict:
    return {
        "cluster": {"name": "kueue-bench",
                    "instance_groups": [{"name": "unit", "instance_type": "unit20", "count": TEAMS}]},
        "instance_types": [{"name": "unit20", "accelerators": 20, "vcpu": 64, "memory_gib": 256}],
        "policy": {
            "task_prioritization": "TaskRanking",
            "priority_classes": [{"name": "p50", "weight": 25}, {"name": "p100", "weight": 50},
                                 {"name": "p200", "weight": 100}],
            "idle_compute_allocation": "FairShare",
        },
        "teams": [
            {"name": f"team{i:02d}", "fair_share_weight": 50,
             "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 500},
             "quota": [{"instance_type": "unit20", "accelerators": 20}]}
            for i in range(TEAMS)
        ],
    }


def write_inputs(d: Path) -> tuple[Path, Path]:
    spec_path = d / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec(), sort_keys=False))
    trace_path = d / "trace.csv"
    with trace_path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["submit_time", "team", "duration", "accelerators", "priority"])
        for i in range(TEAMS):
            for n, acc, secs, prio in SHAPES:
                for _ in range(n):
                    w.writerow([0, f"team{i:02d}", secs, acc, prio])
    return spec_path, trace_path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="write spec.yaml and trace.csv here and keep them")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        spec_path, trace_path = write_inputs(d)
        t0, c0 = time.perf_counter(), time.process_time()
        r = replay(spec_path, trace_path)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    e = r["engine"]
    c = r["cluster"]
    print(f"jobs                      {c['jobs']} ({c['completed']} completed)")
    print(f"physical limit            {PHYSICAL_LIMIT:.1f} s")
    print(f"makespan                  {r['makespan']:.1f} s   (target <= 73 s; Kueue {KUEUE['makespan']:.0f} s)")
    print(f"utilization               {c['utilization']:.1%}   (Kueue {KUEUE['utilization']:.1%})")
    print(f"engine cpu                {e['cpu_seconds']:.3f} s   (target <= 1.5 s)")
    print(f"decisions                 {e['decisions']} in {e['cycles']} cycles")
    print(f"decisions per cpu-second  {e['decisions_per_cpu_second']:.0f}   (target >= 10,000)")
    print(f"preemptions               {c['preemptions']}")
    print(f"wall (load+simulate)      {wall:.2f} s   (process cpu {cpu:.2f} s)")


if __name__ == "__main__":
    main()
