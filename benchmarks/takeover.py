"""Takeover benchmark for standby control planes (``fairpod up --ha``, docs/ha.md): two ``fairpod up --ha`` on
127.0.0.2 and 127.0.0.3 sharing a private PostgreSQL (started here) and one runs directory (local executor,
real processes); jobs stream in (one every 0.3 s, each runs 0.5-3.5 s, every fifth exits 3) while the leader
fails ``--failovers`` times, in turn by SIGKILL (then started again), by SIGSTOP for longer than the lease
(SIGCONT after the takeover) and by losing PostgreSQL (its role may not log in and its sessions are ended;
let in again after the takeover). Each fault waits until the old leader stands by again.

Reported:
- takeover time (p50, p95, max): from the fault until the other node serves as the leader (its own /healthz;
  the lease's expiry, the standby's next try, and the rebuild of memory with re-attaching to the replicas);
- the outcome (all must hold, else exit 1): every accepted job is one job, ended Succeeded/Failed as its command
  makes it, run exactly once; no write by a node that did not hold the lease (a trigger in the database);
- what the fence costs one write transaction (a store with it and one without, alternated, in-process);
- what HA costs a submit: ``--submits`` POST /jobs on one keep-alive connection each to a single ``fairpod up``
  (its own database on the same PostgreSQL server) and to the leader of ``--ha``, alternated one by one so that
  the machine's load weighs on both alike (p50, p99, ms). ``--failovers 0`` measures only this.

Run: ``.venv/bin/python benchmarks/takeover.py [--failovers 20] [--lease 6] [--submits 300]``
(about 8 minutes for 20 failovers). It uses the test helpers of tests/server/ha_cluster.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.server.ha_cluster import (  # noqa: E402
    SEED_SPEC,
    HaCluster,
    JobStream,
    check_outcome,
    failover,
    free_port,
    wait_for,
)
from tests.store.conftest import private_postgres, wipe  # noqa: E402

from _live import exit_on_sigterm, percentile  # noqa: E402


def fresh(url: str) -> None:
    engine = create_engine(url)
    wipe(engine)
    with engine.begin() as c:
        c.execute(text("DROP TABLE IF EXISTS ha_lease, ha_members, ha_test_roles, ha_test_violations"))
    engine.dispose()


def timed_submit(c: httpx.Client, name: str) -> float:
    t0 = time.perf_counter()
    r = c.post("/api/v1/jobs", json={"name": name, "team": "john", "command": ["true"]})
    took = (time.perf_counter() - t0) * 1000
    assert r.status_code == 201, r.text
    return took


def single(url: str, tmp: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """One ``fairpod up`` (no --ha) on ``url``: its process, address and admin token."""
    home, port = tmp / "single", free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("FAIRPOD_URL", "FAIRPOD_TOKEN")}
    env.update(FAIRPOD_HOME=str(home), FAIRPOD_CONFIG=str(home / "config.json"), FAIRPOD_SANDBOX="limits")
    nvml = tmp / "no-gpus.json"
    nvml.write_text(json.dumps({"gpus": []}))
    env["FAIRPOD_FAKE_NVML"] = str(nvml)
    home.mkdir(parents=True, mode=0o700)
    with open(tmp / "single.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "fairpod.cli.main", "up", "--foreground", "--port", str(port),
                                 "--db", url, "--spec", str(SEED_SPEC)], env=env, stdout=log, stderr=log,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: _ok(base), 60, "the single control plane")
    return proc, base, json.loads((home / "config.json").read_text())["token"]


def submit_costs(url: str, ha: HaCluster, tmp: Path, n: int) -> tuple[list[float], list[float]]:
    """``n`` submits to a single control plane (its own database on the same server) and ``n`` to the leader,
    alternated, so that the machine's load weighs on both alike."""
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text("DROP DATABASE IF EXISTS fairpod_single"))
        c.execute(text("CREATE DATABASE fairpod_single"))
    admin.dispose()
    proc, base, token = single(url.replace("/postgres?", "/fairpod_single?"), tmp)
    plain: list[float] = []
    with_ha: list[float] = []
    try:
        lead = ha.leader()
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as a, \
                httpx.Client(base_url=lead.url, headers={"Authorization": f"Bearer {ha.token}"}, timeout=30) as b:
            for k in range(n):
                plain.append(timed_submit(a, f"s{k}"))
                with_ha.append(timed_submit(b, f"s{k}"))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return plain, with_ha


def fence_cost(url: str, n: int) -> tuple[list[float], list[float]]:
    """The fence alone: ``n`` one-event write transactions of a store without it and of one fenced by a held
    lease, alternated (in this process, on the same database)."""
    from fairpod.server.ha.leader import Elector
    from fairpod.store import Store

    elector = Elector(url, "bench", "http://bench")
    elector.start()  # renews the lease in its thread, as a leader's does
    wait_for(elector.holds, 30, "the lease")
    plain_store, fenced = Store(url), Store(url)
    elector.guard(fenced)
    plain: list[float] = []
    with_fence: list[float] = []
    try:
        for k in range(n):
            for store, out in ((plain_store, plain), (fenced, with_fence)):
                t0 = time.perf_counter()
                store.append_event("FenceBench", f"{k}")
                out.append((time.perf_counter() - t0) * 1000)
    finally:
        plain_store.close()
        fenced.close()
        elector.stop(release=True)
    return plain, with_fence


def _ok(base: str) -> bool:
    try:
        return httpx.get(base + "/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def ms(xs: list[float]) -> str:
    return f"p50 {percentile(xs, 50):.1f} ms, p99 {percentile(xs, 99):.1f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--failovers", type=int, default=20)
    ap.add_argument("--lease", type=float, default=6.0, help="--lease-seconds of the control planes (default 6)")
    ap.add_argument("--submits", type=int, default=300)
    a = ap.parse_args()
    exit_on_sigterm()
    tmp = Path(tempfile.mkdtemp(prefix="fairpod-takeover-"))
    try:
        return run(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(a: argparse.Namespace, tmp: Path) -> int:
    with private_postgres() as url:
        fresh(url)
        from fairpod.store import Store

        with Store(url) as s:
            s.create_all()
        plain, fenced = fence_cost(url, a.submits)
        print(f"write transaction, unfenced: {ms(plain)}; fenced: {ms(fenced)}", flush=True)
        fresh(url)
        ha = HaCluster(tmp / "ha", url, n=2, lease=a.lease)
        try:
            ha.boot()
            plain, with_ha = submit_costs(url, ha, tmp, a.submits)
            print(f"submit, single control plane on PostgreSQL: {ms(plain)}")
            print(f"submit, leader of fairpod up --ha:           {ms(with_ha)}  "
                  f"(+{percentile(with_ha, 50) - percentile(plain, 50):.1f} ms p50, "
                  f"+{percentile(with_ha, 99) - percentile(plain, 99):.1f} ms p99)", flush=True)
            if not a.failovers:
                return 0
            stream = JobStream(ha)
            stream.start()
            took: dict[str, list[float]] = {"kill": [], "stop": [], "cut": []}
            try:
                stream.grown(3)
                for i in range(a.failovers):
                    kind = ("kill", "stop", "cut")[i % 3]
                    took[kind].append(failover(ha, kind))
                    print(f"failover {i + 1:2d} ({kind}): {took[kind][-1]:.2f} s", flush=True)
                    stream.grown(2)
            finally:
                stream.stop()
            assert not stream.errors, stream.errors
            jobs = check_outcome(ha, stream, timeout=300)
            every = [t for ts in took.values() for t in ts]
            print(f"takeover ({len(every)} failovers, lease {a.lease:g} s): p50 {percentile(every, 50):.2f} s, "
                  f"p95 {percentile(every, 95):.2f} s, max {max(every):.2f} s")
            for kind, ts in took.items():
                if ts:
                    print(f"  {kind}: p50 {percentile(ts, 50):.2f} s, max {max(ts):.2f} s ({len(ts)})")
            print(f"outcome: {jobs} jobs, every one in its right state and run once; no write without the lease")
        finally:
            ha.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
