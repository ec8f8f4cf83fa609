#!/usr/bin/env python3
"""The control plane under load: 50 concurrent clients submitting and listing against a live server that runs
real jobs, for a bounded time.

A live ``fairpod up`` (real local executor, real SQLite) on a cluster of ``--nodes`` x 4 accelerators, five
teams with equal quotas (LendAndBorrow). Each of ``--clients`` clients loops for ``--seconds``: submit a
1-accelerator job of ``--job-seconds`` (a shell that writes its own start and end times to a file, then sleeps),
list its team's newest 50 jobs, pause ``--think`` seconds. Submissions outrun the cluster, so a queue builds and
every free accelerator should be taken at once. After the clients stop, the queue drains.

Figures (goals in brackets):
- submit and list latency as the clients saw it: p50 / p99 [submit p50 <= 100 ms, p99 <= 500 ms; list p50 <= 50 ms];
- reconcile cycles per second while loaded (from /metrics);
- admissions: accelerator-seconds the jobs really ran (by their own clocks) / accelerator-seconds there were,
  over the loaded window while jobs waited [>= 90 %];
- exit-to-reuse: from a job's own end time on a node to the next job's own start time on that node, while
  jobs were waiting [p50 <= 100 ms], and where that time went (p50 of each stage): the supervisor sees the
  command end, the control plane records the finish (``JobSucceeded``), the engine admits the next job
  (``JobAdmitted``), the executor launches it (``launched_at``), its supervisor is up, its command runs.

    .venv/bin/python benchmarks/load.py                 # 50 clients, 60 s
    .venv/bin/python benchmarks/load.py --seconds 20    # shorter
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _live import (  # noqa: E402
    LiveServer,
    RawClient,
    exit_on_sigterm,
    fetch_jobs,
    json_line,
    marks_dir,
    percentile,
    table,
    wait_all_finished,
)

TEAMS = ("t0", "t1", "t2", "t3", "t4")
ACC_PER_NODE = 4


def spec(nodes: int) -> str:
    per = nodes // len(TEAMS)
    extra = nodes - per * len(TEAMS)
    teams = "\n".join(
        f"  - {{name: {t}, fair_share_weight: 50, sharing: {{strategy: LendAndBorrow, borrow_limit: 500}}, "
        f"quota: [{{instance_type: ml.g5.12xlarge, count: {per + (1 if i < extra else 0)}}}]}}"
        for i, t in enumerate(TEAMS))
    return (f"cluster:\n  name: load\n  instance_groups:\n    - {{name: w, instance_type: ml.g5.12xlarge, "
            f"count: {nodes}}}\npolicy:\n  idle_compute_allocation: FairShare\nteams:\n{teams}\n")


STAGES = ("supervisor saw the end", "finish recorded", "next admitted", "launched", "supervisor up",
          "command ran")


def stage_times(srv: LiveServer, jobs: list[dict]) -> dict[int, dict[str, float]]:
    """Per job id: when its finish and admission were recorded (events, read from the store's SQLite file
    read-only), when it was launched and its supervisor was up and ended (its replica's run files)."""
    from fairpod.model.keys import run_key

    out: dict[int, dict[str, float]] = {j["id"]: {} for j in jobs}
    db = sqlite3.connect(f"file:{srv.home / 'fairpod.db'}?mode=ro", uri=True)
    try:
        for jid, kind, ts in db.execute("SELECT job_id, kind, ts FROM events WHERE kind IN "
                                        "('JobAdmitted', 'JobSucceeded') ORDER BY id"):
            if jid in out:
                out[jid].setdefault(kind, float(ts))
    finally:
        db.close()
    for j in jobs:
        rdir = srv.home / "runs" / run_key(j["name"], j["id"]) / "0" / "0"
        try:
            launch = json.loads((rdir / "launch.json").read_text())
            status = json.loads((rdir / "status.json").read_text())
        except (OSError, ValueError):
            continue
        out[j["id"]].update(launched=float(launch["launched_at"]), up=float(status["started_at"]),
                            down=float(status["ended_at"]))
    return out


def add_stages(stages: dict[str, list[float]], end: float, ended: dict[str, float], start: float,
               started: dict[str, float]) -> None:
    """The stages from one job's own end on a node to the next one's own start there (when all are known)."""
    try:
        marks = [end, ended["down"], ended["JobSucceeded"], started["JobAdmitted"], started["launched"],
                 started["up"], start]
    except KeyError:
        return
    for name, a, b in zip(STAGES, marks[:-1], marks[1:], strict=True):
        stages[name].append(b - a)


def metric(srv: LiveServer, name: str) -> float:
    import httpx

    text = httpx.get(srv.url + "/metrics", timeout=30, headers={"Authorization": f"Bearer {srv.token}"}).text
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60.0, help="how long the clients submit and list")
    ap.add_argument("--nodes", type=int, default=8, help="nodes of 4 accelerators (default 8: 32 accelerators)")
    ap.add_argument("--job-seconds", type=float, default=2.0)
    ap.add_argument("--think", type=float, default=0.5, help="each client's pause between rounds")
    ap.add_argument("--keep", action="store_true", help="keep the server's home (for a post-mortem)")
    a = ap.parse_args()
    exit_on_sigterm()
    with LiveServer(spec(a.nodes), keep=a.keep) as srv:
        marks = marks_dir(srv)
        stop_at = time.monotonic() + a.seconds
        subs: list[float] = []
        lists: list[float] = []
        errors: list[str] = []
        lock = threading.Lock()

        def client(i: int) -> None:
            c = RawClient(srv)
            team = TEAMS[i % len(TEAMS)]
            rnd = random.Random(i)
            n = 0
            try:
                while time.monotonic() < stop_at and n < 100_000:
                    n += 1
                    name = f"c{i}-{n}"
                    out = marks / name
                    body = {"name": name, "team": team, "accelerators": 1, "termination_grace_seconds": 1,
                            "workdir": str(marks),
                            "command": ["sh", "-c", f'date +%s.%N > {out}; sleep {a.job_seconds}; '
                                        f'date +%s.%N >> {out}']}
                    t0 = time.perf_counter()
                    st, _ = c.request("POST", "/jobs", body)
                    t1 = time.perf_counter()
                    st2, _ = c.request("GET", f"/jobs?team={team}&limit=50")
                    t2 = time.perf_counter()
                    with lock:
                        subs.append(t1 - t0)
                        lists.append(t2 - t1)
                        if st != 201 or st2 != 200:
                            errors.append(f"submit {st} list {st2}")
                    time.sleep(a.think * (0.5 + rnd.random()))
            finally:
                c.close()

        cycles0 = metric(srv, "fairpod_scheduler_cycles_total")
        t_start = time.time()
        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(a.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=a.seconds + 120)
        t_end = time.time()
        cycles1 = metric(srv, "fairpod_scheduler_cycles_total")
        wait_all_finished(srv, 1800, interval=0.5)
        jobs = fetch_jobs(srv)
        times = stage_times(srv, jobs)
        runs: list[tuple[float, float, str, int]] = []  # each job's own start and end times, its node, its id
        for j in jobs:
            try:
                ts = [float(x) for x in (marks / j["name"]).read_text().split()]
            except (OSError, ValueError):
                continue
            if len(ts) == 2 and j.get("placement"):
                runs.append((ts[0], ts[1], j["placement"][0], j["id"]))

    submitted = {j["name"]: j["submit_time"] for j in jobs}
    # the loaded window: from the first moment the cluster could be full to the last submit
    lo, hi = t_start + 2.0, t_end
    waiting_until = max(submitted.values())
    slots = a.nodes * ACC_PER_NODE
    used = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e, _, _ in runs)
    admissions = used / (slots * (hi - lo)) if hi > lo else float("nan")
    gaps: list[float] = []
    stages: dict[str, list[float]] = {name: [] for name in STAGES}
    by_node: dict[str, list[tuple[float, float, int]]] = {}
    for s, e, node, jid in runs:
        by_node.setdefault(node, []).append((s, e, jid))
    for node_runs in by_node.values():
        ends = sorted((e, jid) for _, e, jid in node_runs)
        starts = sorted((s, jid) for s, _, jid in node_runs)
        k = 0
        for e, ended in ends:
            if not (lo <= e <= min(hi, waiting_until)):
                continue
            while k < len(starts) and starts[k][0] < e:
                k += 1
            if k < len(starts):
                gaps.append(starts[k][0] - e)
                add_stages(stages, e, times.get(ended, {}), starts[k][0], times.get(starts[k][1], {}))
                k += 1
    ms = 1000.0
    figures = {
        "clients": a.clients, "seconds": a.seconds, "accelerators": slots, "jobs": len(jobs),
        "submits": len(subs), "errors": len(errors),
        "submit_p50_ms": percentile(subs, 50) * ms, "submit_p99_ms": percentile(subs, 99) * ms,
        "list_p50_ms": percentile(lists, 50) * ms, "list_p99_ms": percentile(lists, 99) * ms,
        "cycles_per_s": (cycles1 - cycles0) / (t_end - t_start),
        "admissions_pct": 100 * admissions,
        "exit_to_reuse_p50_ms": percentile(gaps, 50) * ms, "exit_to_reuse_p95_ms": percentile(gaps, 95) * ms,
        "exit_to_reuse_stages_p50_ms": {k: round(percentile(v, 50) * ms, 1) for k, v in stages.items()},
    }
    print(table([
        ("clients x seconds", f"{a.clients} x {a.seconds:g} s on {slots} accelerators ({a.nodes} nodes)"),
        ("jobs submitted / errors", f"{len(subs)} / {len(errors)}"),
        ("submit p50 / p99", f"{figures['submit_p50_ms']:.0f} / {figures['submit_p99_ms']:.0f} ms  "
                             "(goal <= 100 / 500)"),
        ("list p50 / p99", f"{figures['list_p50_ms']:.0f} / {figures['list_p99_ms']:.0f} ms  (goal p50 <= 50)"),
        ("reconcile cycles / s", f"{figures['cycles_per_s']:.1f}"),
        ("admissions", f"{figures['admissions_pct']:.1f} % of accelerator-seconds while jobs waited  (goal >= 90)"),
        ("exit to reuse p50 / p95", f"{figures['exit_to_reuse_p50_ms']:.0f} / {figures['exit_to_reuse_p95_ms']:.0f} ms"
                                    "  (goal p50 <= 100)"),
        ("  where it went (p50)", ", ".join(f"{k} {v:.0f}" for k, v in figures["exit_to_reuse_stages_p50_ms"].items())
                                  + " ms"),
    ]))
    if errors:
        print("first errors:", errors[:5], file=sys.stderr)
    print(json_line(figures))
    if not runs:  # nothing measured is no result, never a pass
        print("measured nothing: no job's own start and end times were found in its workdir", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
