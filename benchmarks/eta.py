"""The cost of estimating start times (``fairpod.server.accounting.eta``) on a queue of 1,000 pending jobs.

A real control plane (SQLite store in a temporary directory, the benchmark-only timed executor, which runs no
processes) on the contended ITP cluster (``examples/itp/contended.yaml``: 128 x p4d, ten teams): jobs of 1 to 8
GPUs and 1 to 8 nodes are submitted until the cluster is full and ``--pending`` jobs wait; most declare a
duration (10 min to 10 h), one in five does not
(``--undeclared``). Then the estimates are refreshed ``--repeat`` times, as the
server's estimate thread does every 5 s, and the script prints how long the control plane's lock was held (the
snapshot copy), the forecast's wall and CPU time (outside the lock), and how many jobs got an estimate.

Run: ``.venv/bin/python benchmarks/eta.py [--pending 1000] [--repeat 3] [--max-cycles 2000] [--undeclared 0.2]``. Target: the lock
held < 50 ms; the forecast's CPU is spread out by the refresh spacing (at most a quarter of one CPU).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from fairpod.executors.timed import TimedExecutor
from fairpod.model.jobs import JobSpec, JobState
from fairpod.model.spec import load_spec
from fairpod.server.nodes import sync_nodes
from fairpod.server.runtime.wiring import control_plane
from fairpod.store import Store

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pending", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-cycles", type=int, default=2000)
    ap.add_argument("--undeclared", type=float, default=0.2, help="share of jobs without a declared duration")
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "itp" / "contended.yaml")
    args = ap.parse_args()
    rng = random.Random(14)
    with tempfile.TemporaryDirectory(prefix="fairpod-eta-") as tmp:
        store = Store(f"sqlite:///{tmp}/fairpod.db")
        store.create_all()
        spec = load_spec(str(args.spec))
        sync_nodes(store, spec)
        store.put_spec(spec)
        cp = control_plane(store, TimedExecutor(Path(tmp) / "runs"), Path(tmp))
        cp.eta.max_cycles = args.max_cycles
        teams = [t.name for t in spec.teams]
        t0 = time.perf_counter()
        i = 0
        while len(cp.snap.pending) < args.pending and i < 20 * args.pending:
            nodes = rng.choice([1, 1, 1, 1, 2, 2, 4, 8])
            acc = rng.choice([1, 2, 4, 8]) if nodes == 1 else 8
            dur = rng.uniform(600, 36000)
            declared = None if rng.random() < args.undeclared else dur
            cp.submit(JobSpec(name=f"j{i}", team=rng.choice(teams), nodes=nodes, accelerators=acc,
                              command=["sleep", f"{dur:.0f}"], expected_duration_seconds=declared), "bench")
            i += 1
            if i % 100 == 0 or len(cp.snap.pending) >= args.pending:
                cp.reconcile_once()
        running = len(store.list_jobs(state=JobState.RUNNING))
        print(f"setup             {i} jobs submitted in {time.perf_counter() - t0:.1f} s: {running} running, "
              f"{len(cp.snap.pending)} pending on {len(cp.snap.nodes)} nodes")
        for r in range(args.repeat):
            c0, w0 = time.process_time(), time.perf_counter()
            cp.eta.refresh(cp)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            known = [v for v in cp.eta.starts.values() if v is not None]
            last = max(known) - cp.eta.at if known else 0.0
            gap = max(cp.eta.every, cp.eta.spacing * cp.eta.forecast_cpu)
            print(f"refresh {r + 1}         lock held {cp.eta.copy_seconds * 1000:.0f} ms (snapshot pickled), "
                  f"forecast {cp.eta.forecast_seconds:.2f} s wall / {cp.eta.forecast_cpu:.2f} s cpu; whole refresh "
                  f"{wall:.2f} s wall, {cpu:.2f} s cpu; {len(known)} of {len(cp.eta.starts)} estimated (the last "
                  f"{last / 3600:.1f} h ahead); next refresh no sooner than {gap:.1f} s later")
        cp.executor.close()


if __name__ == "__main__":
    main()
