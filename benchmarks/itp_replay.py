"""Replay the ten ITP traces (69,351 real GPU jobs over ~60 days) on examples/itp/spec.yaml.

Runs the code path of ``fairpod simulate examples/itp/spec.yaml ../shared/traces/itp`` and prints the
wall time, the CPU time of the whole process and of the engine alone, makespan, utilization, Jain's index,
and each team's wait p50/p95. Target: <= 60 s wall.

Run: ``.venv/bin/python benchmarks/itp_replay.py [--trace DIR] [--spec YAML] [-o report.json] [--plot usage.png]``.
On a shared machine wall time depends on the load; the process CPU time is the steadier figure.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from fairpod.sim import replay

ROOT = Path(__file__).resolve().parents[1]


def _h(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f} h"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "traces" / "itp")
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "itp" / "spec.yaml")
    ap.add_argument("-o", "--output", type=Path, help="also write the JSON report here")
    ap.add_argument("--plot", type=Path, help="also draw the usage plot here")
    args = ap.parse_args()
    w0, c0 = time.perf_counter(), time.process_time()
    r = replay(args.spec, args.trace, plot=args.plot)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    if args.output:
        args.output.write_text(json.dumps(r, indent=2) + "\n")
    c, e = r["cluster"], r["engine"]
    print(f"jobs              {c['jobs']} ({c['completed']} completed, {len(r['never_ran'])} never ran)")
    print(f"wall              {wall:.1f} s   (target <= 60 s)")
    print(f"process cpu       {cpu:.1f} s")
    print(f"engine cpu        {e['cpu_seconds']:.1f} s   ({e['decisions']} decisions in {e['cycles']} cycles, "
          f"{e['decisions_per_cpu_second']:.0f} decisions/cpu-s)")
    print(f"makespan          {r['makespan']:.0f} s = {r['makespan'] / 86400:.1f} days")
    print(f"utilization       {c['utilization']:.1%} of {c['capacity_accelerators']} GPUs")
    print(f"preemptions       {c['preemptions']}")
    print(f"jain              {r['fairness']['jain']}")
    print(f"{'team':10} {'jobs':>6} {'quota':>5} {'used':>6} {'wait p50':>9} {'wait p95':>9} {'preempt':>7}")
    for name, t in r["teams"].items():
        print(f"{name:10} {t['jobs']:6d} {t['quota_accelerators']:5d} {t['used_share']:6.1%} "
              f"{_h(t['wait_p50']):>9} {_h(t['wait_p95']):>9} {t['preemptions']:7d}")


if __name__ == "__main__":
    main()
