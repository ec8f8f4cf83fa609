#!/usr/bin/env python3
"""The CPU of one submit in an API worker (``fairpod up --api-workers N``), in-process: the worker's own app
(``runtime.wiring.build_worker``: authentication, the body validated, ``transitions.submit.check``, the group
commit's ``write_submits``, the 201's view, the wake of the core) over a real SQLite home made as ``fairpod up``
makes it (the seed spec), driven by Starlette's TestClient in the same process, one submit after another (or
from ``--threads N`` client threads at once: the submits that wait together are one group, one transaction).

It prints the process's CPU per submit (the worker's app and the in-process client together: no server socket,
no other process), the SQL statements and transactions a submit takes on the worker's store (counted on its
engine), and with ``--profile FILE`` a py-spy raw profile of the submits (``py-spy record -f raw``; py-spy must be
on PATH or beside this interpreter). Each commit's wake is a datagram to a reader in this process that only reads
it (a live core wakes its loop: see benchmarks/datacenter.py for the whole server).

    .venv/bin/python benchmarks/worker_submit.py                     # 1,000 submits
    .venv/bin/python benchmarks/worker_submit.py --submits 1500 --profile /tmp/worker.raw
    .venv/bin/python benchmarks/worker_submit.py --threads 16   # concurrent submits: group commit, as live
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "examples" / "seed" / "spec.yaml"


def body(name: str) -> dict[str, Any]:
    return {"name": name, "team": "john", "instance_type": "ml.g5.12xlarge", "nodes": 1, "accelerators": 1,
            "command": ["python", "train.py", "--epochs", "3"], "env": {"A": "1"}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--submits", type=int, default=1000, help="submits measured (default 1,000; 1-100,000)")
    ap.add_argument("--threads", type=int, default=1,
                    help="client threads submitting at once (default 1: one after another; more: the worker's "
                         "group commit writes the submits that wait together in one transaction, as in a live "
                         "server; 1-64)")
    ap.add_argument("--profile", type=Path, help="also write py-spy's raw profile of the submits to this file")
    a = ap.parse_args()
    if not 1 <= a.submits <= 100_000:
        print(f"worker_submit: --submits must be from 1 to 100000, not {a.submits}", file=sys.stderr)
        return 2
    if not 1 <= a.threads <= 64:
        print(f"worker_submit: --threads must be from 1 to 64, not {a.threads}", file=sys.stderr)
        return 2
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if a.profile and not Path(spy).exists():
        print("worker_submit: --profile wants py-spy (pip install py-spy)", file=sys.stderr)
        return 2

    import os

    from fastapi.testclient import TestClient
    from sqlalchemy import event

    from fairpod.executors.base import Traits
    from fairpod.server.runtime.daemon import initialize
    from fairpod.server.runtime.wakes import Wakes
    from fairpod.server.runtime.wiring import build_worker, make_executor

    tmp = Path(tempfile.mkdtemp(prefix="fairpod-worker-submit-"))
    try:
        home = tmp / "home"
        url = f"sqlite:///{home / 'fairpod.db'}"
        store, token = initialize(home, url, str(SEED), 0)
        store.close()
        wakes = Wakes()  # the core's end of the wakes, read and let go, as a live core reads them
        wakes.listen(lambda: None)
        app = build_worker(home, url, Traits.of(make_executor(home, "timed")), "http://127.0.0.1:9",
                           wake=wakes.worker_end)
        auth = {"Authorization": f"Bearer {token}"}
        with TestClient(app, base_url="http://127.0.0.1:9") as c:
            for i in range(50):  # warm: imports, the token's first check, SQLite's pages
                assert c.post("/api/v1/jobs", json=body(f"warm-{i}"), headers=auth).status_code == 201
            said: list[str] = []
            event.listen(app.app.app.state.cp.store.engine, "before_cursor_execute",
                         lambda conn, cur, sql, *_: said.append(sql.split()[0]))
            prof = None
            if a.profile:
                prof = subprocess.Popen([spy, "record", "-p", str(os.getpid()), "-f", "raw", "-r", "500", "-o",
                                         str(a.profile), "--nonblocking"], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                time.sleep(1.0)  # py-spy attached
            core = app.app.app.state.cp
            commits0 = core.submits.commits
            failed: list[str] = []

            def submit(i: int) -> None:
                r = c.post("/api/v1/jobs", json=body(f"s-{i}"), headers=auth)
                if r.status_code != 201:
                    failed.append(f"submit {i}: HTTP {r.status_code} {r.text[:200]}")

            t0, w0 = time.process_time(), time.perf_counter()
            if a.threads == 1:
                for i in range(a.submits):
                    submit(i)
            else:
                with ThreadPoolExecutor(a.threads) as pool:
                    list(pool.map(submit, range(a.submits)))
            cpu, wall = time.process_time() - t0, time.perf_counter() - w0
            groups = core.submits.commits - commits0
            if failed:
                print(f"worker_submit: {len(failed)} failed, the first: {failed[0]}", file=sys.stderr)
                return 1
            if prof is not None:
                prof.send_signal(signal.SIGINT)
                prof.wait(timeout=60)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    kinds = collections.Counter(said)
    out = {"benchmark": "worker_submit", "submits": a.submits, "threads": a.threads,
           "submits_per_group": round(a.submits / max(groups, 1), 2),
           "cpu_ms_per_submit": round(cpu / a.submits * 1e3, 3),
           "submits_per_s": round(a.submits / wall, 1), "sql_per_submit": round(len(said) / a.submits, 2),
           "transactions_per_submit": round(kinds["BEGIN"] / a.submits, 2), "sql": dict(kinds)}
    print(f"{a.submits} submits through an API worker's app: {out['cpu_ms_per_submit']:.2f} ms of CPU each (the app "
          f"and its in-process client), {out['sql_per_submit']:g} SQL statements and "
          f"{out['transactions_per_submit']:g} transactions each ({out['submits_per_group']:g} submits a group); "
          f"{out['submits_per_s']:.0f}/s from {a.threads} client thread(s)")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
