"""The store's read of a list page: ``list_jobs(team=T, limit=100, descending=True)``, as ``GET /jobs?team=T&limit=100``
reads it in an API worker (issue 47: list/get p99 <= 50 ms while submits arrive).

Stores ``--jobs`` jobs of ``--teams`` teams in a SQLite file of its own (the datacenter benchmark's shapes), then
reads ``--pages`` pages of random teams, each twice: first with the process's spec cache empty for that page (a job
this process never read), then again (every spec cached, the rows unchanged). Prints the milliseconds a page, of
the process's CPU, p50 and p99, each way, then a JSON line of them.

    PYTHONPATH=src .venv/bin/python benchmarks/list_page.py --jobs 100000 --teams 500
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from datacenter import SHAPES  # noqa: E402
from fairpod.model.jobs import resolve_job  # noqa: E402
from fairpod.store import jobs  # noqa: E402
from turn_cost import datacenter_store, job, pct  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--teams", type=int, default=500)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pages", type=int, default=400)
    args = ap.parse_args()
    if not (1 <= args.jobs <= 10_000_000 and 1 <= args.teams <= 10_000 and 1 <= args.nodes <= 100_000
            and 1 <= args.pages <= 100_000):
        ap.error("--jobs in 1..10000000, --teams in 1..10000, --nodes in 1..100000 and --pages in 1..100000")
    rng = random.Random(47)
    with tempfile.TemporaryDirectory(prefix="fairpod-list-") as tmp:
        store, spec = datacenter_store(Path(tmp), args.nodes, args.teams)
        per_array, stored, array = 50, 0, 1
        while stored < args.jobs:
            team = (array // per_array) % args.teams
            specs = [job(f"w{stored + i}", team, args.teams, SHAPES[(team + array) % len(SHAPES)], 60.0)
                     for i in range(per_array)]
            store.insert_tasks(specs, resolve_job(specs[0], spec), ["queued"] * per_array, array, None)
            stored += per_array
            array += per_array
        cold: list[float] = []
        warm: list[float] = []
        rows = 0
        for _ in range(args.pages):
            team = f"t{rng.randrange(args.teams):03d}"
            jobs._SPECS.clear()  # this page's specs never read by this process
            for out in (cold, warm):
                t0 = time.process_time()
                page = store.list_jobs(team=team, limit=100, descending=True)
                out.append((time.process_time() - t0) * 1000)
            rows += len(page)
        print(f"list_page: {stored} jobs, {args.teams} teams, {args.pages} pages of {rows / args.pages:.0f} jobs")
        print(f"  specs not cached  p50 {pct(cold, 0.5):.2f} ms, p99 {pct(cold, 0.99):.2f} ms of CPU a page")
        print(f"  specs cached      p50 {pct(warm, 0.5):.2f} ms, p99 {pct(warm, 0.99):.2f} ms of CPU a page")
        store.close()
        print(json.dumps({"benchmark": "list_page", "jobs": stored, "teams": args.teams, "pages": args.pages,
                          "jobs_per_page": rows / args.pages, "uncached_p50_ms": pct(cold, 0.5),
                          "uncached_p99_ms": pct(cold, 0.99), "cached_p50_ms": pct(warm, 0.5),
                          "cached_p99_ms": pct(warm, 0.99)}))


if __name__ == "__main__":
    main()
