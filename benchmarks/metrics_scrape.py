"""The cost of a ``/metrics`` scrape as the store keeps more finished jobs (issue 34).

A real control plane (SQLite store in a temporary directory, the timed executor: no processes) on the seed spec
(``examples/seed/spec.yaml``), with ``--jobs`` finished jobs stored (one multi-row insert per 5,000, spread over
the last day: admitted 1-600 s after submission, run 1 s to 10 h). Then ``--scrapes`` scrapes, each after one
more job ended, as Prometheus would do every 15 s; the script prints the first scrape (a fresh control plane reads
every job once), then the later ones' median wall time, the job rows they read and the body's size.

Run: ``.venv/bin/python benchmarks/metrics_scrape.py [--jobs 100000] [--scrapes 10]``. Goal: a later scrape's
time and size do not grow with ``--jobs``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from fairpod.executors.timed import TimedExecutor
from fairpod.model.jobs import JobSpec, JobState, resolve_job
from fairpod.model.spec import load_spec
from fairpod.server.api.metrics import FairpodCollector
from fairpod.server.core import ControlPlane
from fairpod.server.nodes import sync_nodes
from fairpod.server.runtime.wiring import control_plane
from fairpod.store import Store

ROOT = Path(__file__).resolve().parents[1]


def finished(store: Store, cp: ControlPlane, n: int, first: int, now: float, rng: random.Random) -> None:
    for start in range(0, n, 5000):
        k = min(5000, n - start)
        team = rng.choice([t.name for t in cp.spec.teams])
        specs = [JobSpec(name=f"j{first + start + i}", team=team, command=["true"]) for i in range(k)]
        submitted = now - 86400
        jobs = store.insert_tasks(specs, resolve_job(specs[0], cp.spec), ["queued"] * k, first + start + 1, None,
                                  now=submitted)
        ups = {}
        for i, j in enumerate(jobs):
            t0 = submitted + (i * 86400.0 / k if n > 1 else 86400.0)
            began = t0 + rng.uniform(1, 600)
            ups[j.id] = {"state": JobState.SUCCEEDED, "first_started_at": began,
                         "finished_at": min(now, began + rng.uniform(1, 36000))}
        store.update_jobs(ups)


def read(collector: FairpodCollector) -> int:
    """The job rows the collector's scrapes read so far (-1: a version that does not count them)."""
    jobs = getattr(collector, "jobs", None)
    return -1 if jobs is None else jobs.rows_read


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--scrapes", type=int, default=10)
    args = ap.parse_args()
    rng = random.Random(34)
    with tempfile.TemporaryDirectory(prefix="fairpod-metrics-") as tmp:
        store = Store(f"sqlite:///{tmp}/fairpod.db")
        store.create_all()
        spec = load_spec(str(ROOT / "examples" / "seed" / "spec.yaml"))
        sync_nodes(store, spec)
        store.put_spec(spec)
        cp = control_plane(store, TimedExecutor(Path(tmp) / "runs"), Path(tmp))
        now = time.time()
        t0 = time.perf_counter()
        finished(store, cp, args.jobs, 0, now, rng)
        print(f"stored            {args.jobs} finished jobs in {time.perf_counter() - t0:.1f} s")
        collector = FairpodCollector(cp)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        t0 = time.perf_counter()
        body = generate_latest(registry)
        print(f"first scrape      {1000 * (time.perf_counter() - t0):.1f} ms, {len(body) / 1024:.0f} KiB, "
              f"{read(collector)} job rows read")
        walls, rows = [], []
        for s in range(args.scrapes):
            finished(store, cp, 1, args.jobs + s, time.time(), rng)
            before = read(collector)
            t0 = time.perf_counter()
            body = generate_latest(registry)
            walls.append(time.perf_counter() - t0)
            rows.append(read(collector) - before)
        print(f"later scrapes     p50 {1000 * statistics.median(walls):.1f} ms, max {1000 * max(walls):.1f} ms, "
              f"{len(body) / 1024:.0f} KiB, job rows read p50 {statistics.median(rows):.0f} max {max(rows)}")
        cp.stop()
        store.close()


if __name__ == "__main__":
    main()
