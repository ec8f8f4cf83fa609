#!/usr/bin/env python3
"""Kueue's scheduler-performance "baseline" shape, submitted through the HTTP API to a live fairpod server.

30 teams, each with a quota of 20 accelerators (the cluster: 30 nodes of a custom type unit20 with 20
accelerators, 64 vCPU, 256 GiB) and a borrow limit of 500 %; TaskRanking with three priority classes
(p50 / p100 / p200 with weights 25 / 50 / 100, standing for Kueue's priorities 50 / 100 / 200). Each team submits 350 jobs of 1 accelerator
lasting 0.2 s (lowest class), 100 of 5 accelerators for 0.5 s (middle) and 50 of 20 for 1 s (highest):
15,000 jobs, 39,600 accelerator-seconds, so at least 66 s on 600 accelerators. Kueue's published figure for
the same shape is 351 s.

By default jobs run on the *timed* executor (``fairpod up --executor timed``), a benchmark/testing executor
that starts NO processes: each job only waits out its duration. Starting 15,000 real processes at this rate
does not fit on a small machine (see benchmarks/README.md); ``--executor local`` runs real ``sleep``
processes instead.

Figures: wall time from the first submit to the last job finished (server records), mean accelerator usage
over that window (from the jobs' started/finished times), the submit rate, and the server's CPU time.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _live import (  # noqa: E402
    LiveServer,
    exit_on_sigterm,
    fetch_jobs,
    json_line,
    machine_cpu_seconds,
    percentile,
    self_cpu_seconds,
    submit_all,
    table,
    wait_all_finished,
)

KUEUE_SECONDS = 351.0
# (job kind, priority class (Kueue's priority), fairpod weight, accelerators, seconds, jobs per team); the
# class names and weights are those of benchmarks/kueue_baseline.py (the same shape in the simulator)
CLASSES = [
    ("small", "p50", 25, 1, 0.2, 350),
    ("medium", "p100", 50, 5, 0.5, 100),
    ("large", "p200", 100, 20, 1.0, 50),
]


def spec_yaml(teams: int, quota: int, node_acc: int, nodes: int, borrow_limit: int) -> str:
    lines = [
        "cluster:",
        "  name: kueue-baseline",
        "  instance_groups:",
        f"    - {{name: unit, instance_type: unit{node_acc}, count: {nodes}}}",
        "instance_types:",
        f"  - {{name: unit{node_acc}, accelerators: {node_acc}, vcpu: 64, memory_gib: 256}}",
        "policy:",
        "  task_prioritization: TaskRanking",
        "  priority_classes:",
        *[f"    - {{name: {cls}, weight: {w}}}" for _, cls, w, *_ in CLASSES],
        "  idle_compute_allocation: FairShare",
        "teams:",
    ]
    for t in range(teams):
        lines += [
            f"  - name: team-{t:02d}",
            "    fair_share_weight: 50",
            f"    sharing: {{strategy: LendAndBorrow, borrow_limit: {borrow_limit}}}",
            f"    quota: [{{instance_type: unit{node_acc}, accelerators: {quota}}}]",
        ]
    return "\n".join(lines) + "\n"


def job_bodies(teams: int, scale: float, seed: int) -> list[dict]:
    rng = random.Random(seed)
    per_team = []
    for t in range(teams):
        jobs = []
        for name, cls, _, acc, secs, count in CLASSES:
            for i in range(max(1, round(count * scale))):
                jobs.append({
                    "name": f"{name}-{i}", "team": f"team-{t:02d}", "priority": cls, "accelerators": acc,
                    "command": ["sleep", f"{secs:g}"], "env": {"FAIRPOD_BENCH_DURATION": f"{secs:g}"},
                    "termination_grace_seconds": 1,
                })  # fmt: skip
        rng.shuffle(jobs)
        per_team.append(jobs)
    # round robin over the teams, each team's jobs in a shuffled order
    return [jobs[i] for i in range(max(len(j) for j in per_team)) for jobs in per_team if i < len(jobs)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--executor", choices=["timed", "local"], default="timed",
                    help="timed (default): no processes, each job waits out its duration (benchmark/testing "
                    "executor); local: real 'sleep' processes")
    ap.add_argument("--teams", type=int, default=30, help="teams, one 20-accelerator node each (default 30)")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of each team's 500 jobs (default 1)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent HTTP submitters (default 8)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the submit order (default 1)")
    ap.add_argument("--timeout", type=float, default=900, help="give up after this many seconds (default 900)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary FAIRPOD_HOME (printed)")
    a = ap.parse_args()
    exit_on_sigterm()

    spec = spec_yaml(a.teams, 20, 20, a.teams, 500)
    bodies = job_bodies(a.teams, a.scale, a.seed)
    capacity = 20 * a.teams
    work = sum(b["accelerators"] * float(b["env"]["FAIRPOD_BENCH_DURATION"]) for b in bodies)
    ideal = work / capacity
    print(f"api_baseline: {len(bodies)} jobs of {a.teams} teams on {capacity} accelerators through the HTTP API; "
          f"executor {a.executor}" + (" (benchmark executor: NO processes, jobs wait out their duration)"
                                      if a.executor == "timed" else " (real sleep processes)"), flush=True)
    load = os.getloadavg()[0]
    with LiveServer(spec, executor=a.executor, keep=a.keep) as srv:
        if a.keep:
            print(f"  state kept in {srv.tmp}")
        cpu0, mcpu0, ccpu0 = srv.server_cpu_seconds() or 0.0, machine_cpu_seconds(), self_cpu_seconds()
        t_first = time.time()
        subs = submit_all(srv, bodies, a.clients)
        t_submitted = time.time()
        print(f"  submitted {len(subs)} jobs in {t_submitted - t_first:.1f} s; waiting for them to finish", flush=True)
        wait_all_finished(srv, a.timeout, interval=0.2)
        cpu1, mcpu1, ccpu1 = srv.server_cpu_seconds() or 0.0, machine_cpu_seconds(), self_cpu_seconds()
        jobs = fetch_jobs(srv)
    t_first = min(s[0] for s in subs)
    bad = [j for j in jobs if j["state"] != "Succeeded"]
    last = max(j["finished_at"] for j in jobs)
    wall = last - t_first
    busy = sum(j["accelerators_per_node"] * j["nodes"] * (j["finished_at"] - j["started_at"])
               for j in jobs if j["started_at"] is not None and j["finished_at"] is not None)
    usage = busy / (capacity * wall)
    submit_rate = len(subs) / (t_submitted - t_first)
    lat = [j["started_at"] - j["submit_time"] for j in jobs if j["started_at"]]
    kind = {cls: name for name, cls, *_ in CLASSES}
    by_class: dict[str, list[float]] = {}
    for j in jobs:
        by_class.setdefault(kind.get(j["priority"], j["priority"]), []).append(j["finished_at"] - t_first)
    preemptions = sum(j["preemptions"] for j in jobs)
    rows = [
        ("executor", a.executor + (" (no processes)" if a.executor == "timed" else " (real processes)")),
        ("jobs", f"{len(jobs)} ({len(jobs) - len(bad)} Succeeded)"),
        ("wall time, first submit to last finish", f"{wall:.1f} s  (ideal {ideal:.0f} s; Kueue {KUEUE_SECONDS:.0f} s)"),
        ("mean accelerator usage", f"{usage * 100:.1f} %"),
        ("submit rate", f"{submit_rate:.0f} jobs/s ({a.clients} clients; all submitted after "
                        f"{t_submitted - t_first:.1f} s)"),
        ("last finish per class", ", ".join(f"{c} {max(v):.1f} s" for c, v in sorted(by_class.items()))),
        ("queue wait p50 / p95", f"{percentile(lat, 50):.1f} / {percentile(lat, 95):.1f} s"),
        ("preemptions", str(preemptions)),
        ("server CPU", f"{cpu1 - cpu0:.1f} s ({(cpu1 - cpu0) / len(jobs) * 1000:.1f} ms per job)"),
        ("client CPU (this process)", f"{ccpu1 - ccpu0:.1f} s"),
        ("machine CPU (all processes)", f"{mcpu1 - mcpu0:.1f} s of {os.cpu_count()} cores x {wall:.0f} s; "
                                        f"load average before {load:.1f}"),
        ("vs Kueue", f"{KUEUE_SECONDS / wall:.1f}x faster" if a.scale == 1 and a.teams == 30 else "n/a (scaled)"),
    ]
    print(table(rows))
    print(json_line({
        "benchmark": "api_baseline", "executor": a.executor, "processes": a.executor != "timed",
        "jobs": len(jobs), "succeeded": len(jobs) - len(bad), "teams": a.teams, "accelerators": capacity,
        "wall_s": wall, "ideal_s": ideal, "kueue_s": KUEUE_SECONDS, "usage": usage,
        "submit_rate_per_s": submit_rate, "submit_s": t_submitted - t_first, "clients": a.clients,
        "preemptions": preemptions, "server_cpu_s": cpu1 - cpu0, "client_cpu_s": ccpu1 - ccpu0,
        "machine_cpu_s": mcpu1 - mcpu0, "cores": os.cpu_count(), "load_before": load,
        "queue_wait_p50_s": percentile(lat, 50), "queue_wait_p95_s": percentile(lat, 95),
    }))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
