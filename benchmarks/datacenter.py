#!/usr/bin/env python3
"""A datacenter on one control plane: a live ``fairpod up --executor timed`` (no processes; each job waits out
its duration) with the real store, at the size of a large cluster.

The spec: ``--nodes`` nodes of 8 accelerators in 10 instance types (``dc0``..``dc9``, one instance group each),
``--teams`` teams spread over the types with equal quotas, LendAndBorrow (borrow limit 200 %), FairShare for idle
capacity. The run, bounded in time at every step:

1. **fill**: job arrays through ``POST /jobs/array`` (8 client threads) until the cluster is full and
   ``--waiting`` jobs wait (each team 4 arrays of its own shape: 1, 2, 4 or 8 accelerators on one node, or 2
   nodes x 8; each array one duration between ``--min-duration`` and ``--max-duration``, 30-600 s);
2. **steady**: for ``--seconds``, single submits (``POST /jobs``) at ``--rate`` per second (open loop,
   ``--submit-threads`` threads, 8 by default; a server that cannot keep up gets as many as they can send back to
   back until the time is up: at most threads / mean latency per second, ~200/s with 8 at 40 ms) while jobs
   finish and others start; beside them one reader alternates a ``GET /jobs?limit=100`` page (of a
   team) and a ``GET /jobs/{id}``;
3. ``/metrics`` scraped (time, size) before and after steady: reconcile turns (whole turn and the engine's cycle,
   from their histograms), admissions per second, the engine's CPU per admission;
4. **decisions**: with submits stopped, 2 % of the running jobs cancelled at once; the engine's cycle time per
   admission into the capacity they free (the same share at every size: a flat engine costs the same per
   admission at 1,000 and 10,000 nodes);
5. the dashboard's pages in headless Chromium (``--no-browser`` skips it): time to first paint and until the
   page shows its data, for the cluster, teams and tasks pages;
6. **restart**: ``kill -9`` of the server, a new one on the same store; time to ``/healthz`` and to the first
   admission.

Goals (issue 34, on a 2-core machine): submits >= 1,000/s sustained, submit p50/p99 <= 20/200 ms, list page and
get-job p99 <= 50 ms, reconcile turn p99 <= 1 s, server RSS <= 2 GiB, restart to the first admission <= 30 s,
dashboard first paint <= 2 s; the engine's cost per admission flat from 1,000 to 10,000 nodes.

    .venv/bin/python benchmarks/datacenter.py --small                 # seconds: 100 nodes, 1,000 waiting
    .venv/bin/python benchmarks/datacenter.py --nodes 1000 --waiting 10000
    .venv/bin/python benchmarks/datacenter.py                         # 10,000 nodes, 100,000 waiting
    .venv/bin/python benchmarks/datacenter.py --postgres              # the same on a private PostgreSQL server

It prints a table and, last, one JSON line (``-o FILE`` writes it to a file as well).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _live import (  # noqa: E402
    LiveServer,
    RawClient,
    exit_on_sigterm,
    json_line,
    percentile,
    postgres,
    proc_cpu_seconds,
    submit_all,
    table,
)

TYPES = 10
BURST_SHARE = 0.02  # the running jobs cancelled at once to measure the engine's cost per decision
ACC = 8
SHAPES = ((1, 1), (1, 2), (1, 4), (1, 8), (2, 8))  # (nodes, accelerators per node)
GOALS = {"submit_rate": 1000.0, "submit_p50_ms": 20.0, "submit_p99_ms": 200.0, "list_p99_ms": 50.0,
         "get_p99_ms": 50.0, "turn_p99_s": 1.0, "rss_mib": 2048.0, "restart_s": 30.0, "paint_s": 2.0}


def spec_yaml(nodes: int, teams: int) -> str:
    per_type = [nodes // TYPES + (1 if i < nodes % TYPES else 0) for i in range(TYPES)]
    lines = ["cluster:", "  name: datacenter", "  instance_groups:"]
    lines += [f"    - {{name: g{i}, instance_type: dc{i}, count: {n}}}" for i, n in enumerate(per_type)]
    lines += ["instance_types:"]
    lines += [f"  - {{name: dc{i}, accelerators: {ACC}, vcpu: 192, memory_gib: 2048}}" for i in range(TYPES)]
    lines += ["policy:", "  idle_compute_allocation: FairShare", "teams:"]
    for t in range(teams):
        it = t % TYPES
        on_type = len(range(it, teams, TYPES))
        quota = max(1, per_type[it] * ACC // on_type)
        lines += [f"  - name: t{t:03d}", "    fair_share_weight: 50",
                  "    sharing: {strategy: LendAndBorrow, borrow_limit: 200}",
                  f"    quota: [{{instance_type: dc{it}, accelerators: {quota}}}]"]
    return "\n".join(lines) + "\n"


def job_body(name: str, team: int, shape: tuple[int, int], seconds: float) -> dict[str, Any]:
    nodes, acc = shape
    return {"name": name, "team": f"t{team:03d}", "instance_type": f"dc{team % TYPES}", "nodes": nodes,
            "accelerators": acc, "command": ["sleep", f"{seconds:g}"],
            "env": {"FAIRPOD_BENCH_DURATION": f"{seconds:g}"}, "termination_grace_seconds": 1}


def in_threads(target: Callable[[], None], n: int, deadline: float) -> None:
    """``target`` in ``n`` threads at once; returns when all have ended or the deadline has passed."""
    ts = [threading.Thread(target=target, daemon=True) for _ in range(n)]
    for th in ts:
        th.start()
    for th in ts:
        th.join(timeout=max(1.0, deadline - time.time()))


def count(c: RawClient, state: str | None = None) -> int:
    q = "/jobs?limit=1" + (f"&state={state}" if state else "")
    status, d = c.request("GET", q)
    if status != 200:
        raise RuntimeError(f"GET {q}: HTTP {status} {str(d)[:200]}")
    return int(d["total"])


def fill(srv: LiveServer, teams: int, target: int, seed: int, deadline: float, durations: tuple[float, float]
         ) -> tuple[int, float]:
    """Arrays until ``target`` jobs wait; returns (jobs submitted, seconds)."""
    rng = random.Random(seed)
    t0 = time.time()
    submitted = 0
    lock = threading.Lock()
    errors: list[str] = []
    batch = 0
    with_c = RawClient(srv, timeout=600)
    try:
        while time.time() < deadline and not errors:
            waiting = count(with_c, "Pending")
            if waiting >= target:
                break
            # per team up to 4 arrays of its own shapes, sized so that one round adds the missing jobs and a
            # tenth more (jobs start and finish meanwhile), in arrays of 20 to 1,000 tasks
            missing = (target - waiting) * 11 // 10 + 1
            per_array = max(20, min(1000, missing // (teams * 4) + 1))
            work = [(t, k) for k in range(4) for t in range(teams)][:max(1, -(-missing // per_array))]
            rng.shuffle(work)
            it = iter(work)

            def submit_arrays(b: int = batch, n: int = per_array, it: Iterator[tuple[int, int]] = it) -> None:
                nonlocal submitted
                c = RawClient(srv, timeout=600)
                try:
                    while not errors and time.time() < deadline:
                        with lock:
                            nxt = next(it, None)
                        if nxt is None:
                            return
                        t, k = nxt
                        shape = SHAPES[(t + k) % len(SHAPES)]
                        body = {"job": job_body(f"fill{b}-{k}", t, shape, rng.uniform(*durations)),
                                "array": f"0-{n - 1}"}
                        status, d = c.request("POST", "/jobs/array", body)
                        if status not in (200, 201):
                            errors.append(f"array: HTTP {status} {str(d)[:300]}")
                            return
                        with lock:
                            submitted += n
                finally:
                    c.close()

            in_threads(submit_arrays, 8, deadline)
            batch += 1
    finally:
        with_c.close()
    if errors:
        raise RuntimeError(errors[0])
    return submitted, time.time() - t0


def scrape(srv: LiveServer) -> tuple[dict[str, float], float, int]:
    """The sums of /metrics' series by name (and of histogram buckets by ``name{le}``), scrape seconds, bytes."""
    c = RawClient(srv, timeout=600)
    try:
        t0 = time.perf_counter()
        c.conn.request("GET", "/metrics", headers=c.headers)
        r = c.conn.getresponse()
        raw = r.read()
        dt = time.perf_counter() - t0
    finally:
        c.close()
    out: dict[str, float] = {}
    for line in raw.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, val = line.rpartition(" ")
        name = key.split("{", 1)[0]
        if name.endswith("_bucket"):
            le = key.rsplit('le="', 1)[1].split('"', 1)[0]
            name = f"{name}{{{le}}}"
        out[name] = out.get(name, 0.0) + float(val)
        if 'generation="' in key:  # the cycle collector's series also by generation
            gen = key.split('generation="', 1)[1].split('"', 1)[0]
            out[f"{name}{{{gen}}}"] = float(val)
        if 'process="' in key and not name.endswith("}"):  # the write lock's waits also by process
            proc = key.split('process="', 1)[1].split('"', 1)[0]
            out[f"{name}{{{proc}}}"] = float(val)
    return out, dt, len(raw)


def hist_quantile(before: dict[str, float], after: dict[str, float], name: str, q: float) -> float:
    """The ``q`` quantile of a histogram's observations between two scrapes (the upper bound of its bucket;
    inf if above the last bound)."""
    bounds = sorted((float(k.split("{", 1)[1][:-1]), k) for k in after
                    if k.startswith(name + "_bucket{") and not k.endswith("{+Inf}"))
    total = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
    if total <= 0:
        return float("nan")
    for b, k in bounds:
        if after[k] - before.get(k, 0.0) >= q * total:
            return b
    return float("inf")


def delta(before: dict[str, float], after: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def rss_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MiB."""
    vals = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                vals[line.split(":")[0]] = int(line.split()[1]) / 1024
    return vals.get("VmRSS", float("nan")), vals.get("VmHWM", float("nan"))


def cpu_by_process(srv: LiveServer) -> dict[int, float]:
    """CPU seconds so far of each of the server's processes (pid -> user + system)."""
    return {p: proc_cpu_seconds(p) or 0.0 for p in srv.server_pids()}


def write_waits(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The waits for SQLite's write lock between two scrapes (``fairpod_store_write_wait_seconds``, per process):
    the core's, and the API workers' together (as each reported with its last wake of the core)."""
    name = "fairpod_store_write_wait_seconds"
    out = {"core_write_waits": delta(before, after, f"{name}_count{{core}}"),
           "core_write_wait_s": delta(before, after, f"{name}_sum{{core}}")}
    workers = {k.rsplit("{", 1)[1] for k in after if k.startswith(f"{name}_count{{worker-")}
    out["workers_write_waits"] = sum(delta(before, after, f"{name}_count{{{w}") for w in workers)
    out["workers_write_wait_s"] = sum(delta(before, after, f"{name}_sum{{{w}") for w in workers)
    out["write_wait_p99_s"] = hist_quantile(before, after, name, 0.99)
    return out


def steady(srv: LiveServer, teams: int, rate: float, seconds: float, seed: int, durations: tuple[float, float],
           threads: int = 8, keys: bool = False) -> tuple[list[float], int, list[float], list[float], float]:
    """Submits at ``rate``/s for ``seconds`` (``threads`` threads, open loop) and one reader; returns (submit latencies,
    submits done, list latencies, get latencies, seconds the submits took)."""
    rng = random.Random(seed)
    bodies = [job_body(f"s{i}", rng.randrange(teams), SHAPES[rng.randrange(len(SHAPES))], rng.uniform(*durations))
              for i in range(int(rate * seconds))]
    lists: list[float] = []
    gets: list[float] = []
    ids: list[int] = []
    errors: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        c = RawClient(srv)
        try:
            k = 0
            while not stop.is_set() and not errors:
                k += 1
                t0 = time.perf_counter()
                if k % 2:
                    status, d = c.request("GET", f"/jobs?team=t{rng.randrange(teams):03d}&limit=100")
                    (lists if status == 200 else errors).append(time.perf_counter() - t0 if status == 200
                                                                else f"list: HTTP {status}")  # type: ignore[arg-type]
                elif ids:
                    status, d = c.request("GET", f"/jobs/{rng.choice(ids)}")
                    (gets if status == 200 else errors).append(time.perf_counter() - t0 if status == 200
                                                               else f"get: HTTP {status}")  # type: ignore[arg-type]
                time.sleep(0.02)
        finally:
            c.close()

    rd = threading.Thread(target=reader, daemon=True)
    rd.start()
    t_start = time.time()
    try:
        sent = submit_all(srv, bodies, threads, on_submitted=lambda i, t0, t1, job: ids.append(int(job["id"])),
                          pace=rate, until=seconds, keys=keys)
    finally:
        took = time.time() - t_start
        stop.set()
        rd.join(timeout=60)
    if errors:
        raise RuntimeError(str(errors[0]))
    lat = [t1 - t0 for t0, t1, _ in sent]
    return lat, len(lat), lists, gets, took


def decisions(srv: LiveServer, share: float, deadline: float) -> dict[str, float]:
    """The engine's cost per decision: with submits stopped, cancel ``share`` of the running jobs at once (8
    threads) and scrape ``/metrics`` until two turns have started after the last cancel (the first collects
    the stops, one admits into the freed capacity); the engine's cycle seconds and the admissions in between.
    The burst is the same share of the cluster at every size, so a flat engine gives the same cost per
    admission at 1,000 and 10,000 nodes."""
    with srv.client() as c:
        running = c.get("/jobs", params={"state": "Running", "limit": 1}).json()["total"]
        want = max(1, int(running * share))
        ids = [j["id"] for j in c.get("/jobs", params={"state": "Running", "limit": want}).json()["jobs"]]
    m0, _, _ = scrape(srv)
    todo = list(ids)
    errors: list[str] = []
    mu = threading.Lock()

    def canceller() -> None:
        c = RawClient(srv)
        try:
            while not errors:
                with mu:
                    if not todo:
                        return
                    jid = todo.pop()
                status, d = c.request("POST", f"/jobs/{jid}/cancel")
                if status not in (200, 409):  # 409: it ended on its own meanwhile
                    errors.append(f"cancel {jid}: HTTP {status} {str(d)[:200]}")
        finally:
            c.close()

    in_threads(canceller, 8, deadline)
    if errors:
        raise RuntimeError(errors[0])
    m_c, _, _ = scrape(srv)
    turns_at = m_c.get("fairpod_reconcile_turn_duration_seconds_count", 0.0)
    m1 = m_c
    for _ in range(1000):  # bounded: each scrape takes a while at this size
        if m1.get("fairpod_reconcile_turn_duration_seconds_count", 0.0) >= turns_at + 2 or time.time() > deadline:
            break
        time.sleep(0.2)
        m1, _, _ = scrape(srv)
    admitted = delta(m0, m1, "fairpod_admitted_jobs_total")
    eng = delta(m0, m1, "fairpod_scheduler_cycle_duration_seconds_sum")
    cycles = delta(m0, m1, "fairpod_scheduler_cycle_duration_seconds_count")
    return {"decision_cancelled": len(ids), "decision_admitted": admitted, "decision_cycles": cycles,
            "decision_engine_s": eng, "engine_us_per_decision": eng / admitted * 1e6 if admitted else float("nan")}


# what the dashboard's pages ask (dashboard/static/app.js), each timed on its own
DATA = ("/usage/history?window=1h&series=groups", "/nodes?limit=500&problems_first=true", "/cluster",
        "/usage/history?window=1h", "/dashboard/tasks?window=1h", "/events?limit=300")


def dashboard_data(srv: LiveServer, asks: int = 4) -> dict[str, float]:
    """Each request of the dashboard's pages asked ``asks`` times, one after another: the slowest, in seconds."""
    out: dict[str, float] = {}
    with srv.client(timeout=120) as c:
        for path in DATA:
            took = []
            for _ in range(asks):
                t0 = time.perf_counter()
                c.get(path).raise_for_status()
                took.append(time.perf_counter() - t0)
            out[path] = max(took)
    return out


def dashboard(srv: LiveServer, timeout: float) -> dict[str, tuple[float, float]] | str:
    """Per page: (first paint, data shown) in seconds from navigation, in headless Chromium; or why not."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return "playwright is not installed"
    pages = {"cluster": "#kpi-acc .value", "teams": "#team-table tr[data-team]", "tasks": "#task-table tr[data-task]"}
    out: dict[str, tuple[float, float]] = {}
    try:
        with sync_playwright() as pw:
            exe = shutil.which("chromium") or shutil.which("chromium-browser")
            browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
            try:
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                page.set_default_timeout(timeout * 1000)
                page.goto(srv.url + "/")
                page.wait_for_selector("#login-form", state="visible")
                page.fill("#token", srv.token)
                page.click("#login-form button[type=submit]")
                page.wait_for_selector("#nav", state="visible")
                for name, ready in pages.items():
                    page.goto("about:blank")
                    t0 = time.perf_counter()
                    page.goto(f"{srv.url}/#/{name}")
                    page.wait_for_selector(ready)
                    shown = time.perf_counter() - t0
                    paint = page.evaluate("() => (performance.getEntriesByName('first-contentful-paint')[0] "
                                          "|| {startTime: NaN}).startTime / 1000")
                    out[name] = (float(paint), shown)
            finally:
                browser.close()
    except Exception as e:  # noqa: BLE001 - a missing browser is a figure not taken, said so
        return f"not measured: {str(e).splitlines()[0][:200]}"
    return out


def restart(srv: LiveServer, db_url: str, timeout: float) -> tuple[float, float]:
    """kill -9 the server, start a new one on the same store; (seconds to /healthz, to the first admission)."""
    from sqlalchemy import create_engine, text

    eng = create_engine(db_url)
    q = text("SELECT COALESCE(MAX(id), 0) FROM events WHERE kind = 'JobAdmitted'")
    with eng.connect() as conn:
        last = int(conn.execute(q).scalar_one())
    assert srv.proc is not None
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(timeout=60)
    t0 = time.monotonic()
    try:
        srv.start(timeout=timeout)
    except RuntimeError as e:  # not up in time: the figure is "more than the timeout", said so
        print(f"  restart: {str(e).splitlines()[0]}", flush=True)
        return float("inf"), float("inf")
    healthy = time.monotonic() - t0
    deadline = t0 + timeout
    try:
        while time.monotonic() < deadline:
            with eng.connect() as conn:
                if int(conn.execute(q).scalar_one()) > last:
                    return healthy, time.monotonic() - t0
            time.sleep(0.05)
    finally:
        eng.dispose()
    return healthy, float("inf")


@contextmanager
def api_processes(srv: LiveServer, db_url: str, n: int) -> Iterator[None]:
    """``fairpod api`` on 127.0.0.2, 127.0.0.3, …, the core's port: N API processes against the core's database
    and the core, each with a home of its own holding a copy of the core's job-token.key (what an admin copies to
    another host); the benchmark's clients spread over them from then on, their CPU and RSS counted as the
    server's."""
    procs: list[subprocess.Popen[bytes]] = []
    addresses = [f"127.0.0.{2 + i}" for i in range(n)]
    try:
        for addr in addresses:
            home = srv.tmp / f"api-{addr}"
            home.mkdir(mode=0o700)
            shutil.copy(srv.home / "job-token.key", home / "job-token.key")
            os.chmod(home / "job-token.key", 0o600)
            env = {**srv.env, "FAIRPOD_HOME": str(home), "FAIRPOD_DB_URL": db_url}
            with open(home / "api.log", "wb") as log:
                procs.append(subprocess.Popen([sys.executable, "-m", "fairpod.cli.main", "api", "--core", srv.url,
                                               "--address", addr, "--port", str(srv.port)], env=env, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True))
            deadline = time.monotonic() + 120
            while True:
                if procs[-1].poll() is not None:
                    raise SystemExit(f"fairpod api on {addr} ended: {(home / 'api.log').read_text()[-2000:]}")
                try:
                    if httpx.get(f"http://{addr}:{srv.port}/api/v1/jobs?limit=1", timeout=10,
                                 headers={"Authorization": f"Bearer {srv.token}"}).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit(f"fairpod api on {addr} did not serve within 120 s")
                time.sleep(0.2)
        srv.addresses, srv.more_pids = addresses, [p.pid for p in procs]
        print(f"  fairpod api: {n} processes on {', '.join(addresses)}", flush=True)
        yield
    finally:
        srv.addresses, srv.more_pids = ["127.0.0.1"], []
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def goal(value: float, name: str, below: bool = True) -> str:
    g = GOALS[name]
    ok = value <= g if below else value >= g
    return f"(goal {'<=' if below else '>='} {g:g}: {'met' if ok else 'MISSED'})"


def run(a: argparse.Namespace, db_url: str | None) -> dict[str, Any]:
    load0 = os.getloadavg()
    spec = spec_yaml(a.nodes, a.teams)
    t_up = time.monotonic()
    srv = LiveServer(spec, executor="timed", start_timeout=min(900.0, a.timeout),
                     extra=["--api-workers", str(a.api_workers)] if a.api_workers else [])
    if db_url:  # LiveServer leaves the caller's FAIRPOD_DB_URL out of the server's environment: set it here
        srv.env["FAIRPOD_DB_URL"] = db_url
    with srv:
        first_start_s = time.monotonic() - t_up
        engine = httpx.get(srv.url + "/healthz", timeout=30).json().get("engine", "?")
        print(f"  engine: {engine}", flush=True)
        print(f"  first start (the spec's nodes stored): {first_start_s:.1f} s", flush=True)
        store_url = db_url or f"sqlite:///{srv.home / 'fairpod.db'}"
        deadline = time.time() + a.timeout
        assert srv.proc is not None
        t_boot = time.time()
        submitted, fill_s = fill(srv, a.teams, a.waiting, a.seed, deadline, (a.min_duration, a.max_duration))
        print(f"  filled: {submitted} jobs in {fill_s:.1f} s ({submitted / max(fill_s, 1e-9):.0f}/s through "
              f"arrays)", flush=True)
        with api_processes(srv, db_url, a.api_remote) if a.api_remote and db_url else nullcontext():
            m0, _, _ = scrape(srv)
            cpu0, client0, by0 = srv.server_cpu_seconds() or 0.0, time.process_time(), cpu_by_process(srv)
            lat, done, lists, gets, took = steady(srv, a.teams, a.rate, a.seconds, a.seed + 1,
                                                  (a.min_duration, a.max_duration), a.submit_threads, a.keys)
            cpu1, client1, by1 = srv.server_cpu_seconds() or 0.0, time.process_time(), cpu_by_process(srv)
            core_cpu = by1.get(srv.proc.pid, 0.0) - by0.get(srv.proc.pid, 0.0)
            rss, hwm = (sum(v) for v in zip(*(rss_mib(p) for p in srv.server_pids()), strict=True))  # all of them
            core_rss = rss_mib(srv.proc.pid)[0]
            m1, scrape_s, scrape_bytes = scrape(srv)
            waits = write_waits(m0, m1)
        with srv.client() as c:
            waiting = c.get("/jobs", params={"state": "Pending", "limit": 1}).json()["total"]
            running = c.get("/jobs", params={"state": "Running", "limit": 1}).json()["total"]
        turns = delta(m0, m1, "fairpod_reconcile_turn_duration_seconds_count")
        turn_sum = delta(m0, m1, "fairpod_reconcile_turn_duration_seconds_sum")
        eng_sum = delta(m0, m1, "fairpod_scheduler_cycle_duration_seconds_sum")
        admitted = delta(m0, m1, "fairpod_admitted_jobs_total")
        print(f"  steady: {done} submits in {took:.1f} s, submit p50/p99 {percentile(lat, 50) * 1000:.0f}/"
              f"{percentile(lat, 99) * 1000:.0f} ms, list p99 {percentile(lists, 99) * 1000:.0f} ms, get p99 "
              f"{percentile(gets, 99) * 1000:.0f} ms ({len(lists) + len(gets)} reads), {admitted:.0f} admitted, "
              f"{turns:.0f} turns; /metrics {scrape_s:.1f} s, {scrape_bytes // 1024} KiB; RSS {rss:.0f} MiB; "
              f"server CPU {cpu1 - cpu0:.1f} s", flush=True)
        burst = decisions(srv, BURST_SHARE, deadline)
        print(f"  decisions: {burst['decision_cancelled']} running jobs cancelled at once; "
              f"{burst['decision_admitted']:.0f} admitted in {burst['decision_cycles']:.0f} cycles, "
              f"{burst['decision_engine_s']:.3f} s of engine", flush=True)
        data = dashboard_data(srv)
        print(f"  dashboard data (slowest of 4): {', '.join(f'{p} {t:.2f} s' for p, t in data.items())}", flush=True)
        paint = dashboard(srv, a.timeout) if not a.no_browser else "skipped (--no-browser)"
        print(f"  dashboard: {paint}", flush=True)
        healthy_s, first_admit_s = (float("nan"), float("nan")) if a.no_restart else \
            restart(srv, store_url, min(300.0, a.timeout))
        rss_after, _ = rss_mib(srv.proc.pid) if srv.proc and srv.proc.poll() is None else (float("nan"), 0)
        load1 = os.getloadavg()
    r: dict[str, Any] = {
        "benchmark": "datacenter", "store": "postgresql" if db_url else "sqlite", "nodes": a.nodes,
        "api_workers": a.api_workers, "api_remote": a.api_remote,
        "engine": engine,
        "first_start_s": first_start_s,
        "accelerators": a.nodes * ACC, "teams": a.teams, "waiting_target": a.waiting, "fill_jobs": submitted,
        "fill_s": fill_s, "waiting_after": waiting, "running_after": running, "rate_asked": a.rate,
        "submit_threads": a.submit_threads, "keys": a.keys,
        "submits": done, "submit_s": took, "submit_rate": done / took if took else float("nan"),
        "submit_p50_ms": percentile(lat, 50) * 1000, "submit_p99_ms": percentile(lat, 99) * 1000,
        "list_p50_ms": percentile(lists, 50) * 1000, "list_p99_ms": percentile(lists, 99) * 1000,
        "get_p50_ms": percentile(gets, 50) * 1000, "get_p99_ms": percentile(gets, 99) * 1000,
        "reads": len(lists) + len(gets),
        "turns": turns, "turn_mean_s": turn_sum / turns if turns else float("nan"),
        "turn_p50_s": hist_quantile(m0, m1, "fairpod_reconcile_turn_duration_seconds", 0.5),
        "turn_p99_s": hist_quantile(m0, m1, "fairpod_reconcile_turn_duration_seconds", 0.99),
        "engine_share": eng_sum / turn_sum if turn_sum else float("nan"),
        "engine_p99_s": hist_quantile(m0, m1, "fairpod_scheduler_cycle_duration_seconds", 0.99),
        "admitted": admitted, "admissions_per_s": admitted / took if took else float("nan"),
        "engine_us_per_admission": eng_sum / admitted * 1e6 if admitted else float("nan"),
        **burst,
        "gc_pause_s": delta(m0, m1, "fairpod_gc_pause_seconds_total"),
        "gc_collections": delta(m0, m1, "fairpod_gc_collections_total"),
        "gc_longest_s": m1.get("fairpod_gc_longest_pause_seconds", float("nan")),
        "gc_full_pause_s": delta(m0, m1, "fairpod_gc_pause_seconds_total{2}"),
        "gc_full_collections": delta(m0, m1, "fairpod_gc_collections_total{2}"),
        "server_cpu_s": cpu1 - cpu0, "core_cpu_s": core_cpu, "workers_cpu_s": cpu1 - cpu0 - core_cpu,
        "core_rss_mib": core_rss, **waits,
        "client_cpu_s": client1 - client0, "rss_mib": rss, "rss_peak_mib": hwm, "rss_after_restart_mib": rss_after,
        "metrics_scrape_s": scrape_s, "metrics_bytes": scrape_bytes,
        "restart_healthz_s": healthy_s, "restart_first_admission_s": first_admit_s,
        "dashboard": paint, "dashboard_data_s": data, "load_before": load0[0], "load_after": load1[0], "boot_to_end_s": time.time() - t_boot,
    }
    return r


def report(r: dict[str, Any]) -> str:
    paint = r["dashboard"]
    rows = [
        ("store / size", f"{r['store']}: {r['nodes']} nodes x {ACC} = {r['accelerators']} accelerators, "
                         f"{r['teams']} teams; {r.get('engine', '?')} engine; "
                         f"{r.get('api_workers', 0)} API workers, {r.get('api_remote', 0)} fairpod api"),
        ("first start", f"{r['first_start_s']:.1f} s to /healthz (the spec's nodes stored)"),
        ("fill", f"{r['fill_jobs']} jobs through arrays in {r['fill_s']:.1f} s; after steady: "
                 f"{r['waiting_after']} waiting, {r['running_after']} running"),
        ("sustained submits", f"{r['submit_rate']:.0f}/s ({r['submits']} at {r['rate_asked']:g}/s asked, "
                              f"{r['submit_threads']} client threads) "
                              f"{goal(r['submit_rate'], 'submit_rate', below=False)}"),
        ("submit p50 / p99", f"{r['submit_p50_ms']:.1f} / {r['submit_p99_ms']:.1f} ms "
                             f"{goal(r['submit_p50_ms'], 'submit_p50_ms')} {goal(r['submit_p99_ms'], 'submit_p99_ms')}"),
        ("list page of 100 p50 / p99", f"{r['list_p50_ms']:.1f} / {r['list_p99_ms']:.1f} ms "
                                       f"{goal(r['list_p99_ms'], 'list_p99_ms')}"),
        ("get-job p50 / p99", f"{r['get_p50_ms']:.1f} / {r['get_p99_ms']:.1f} ms {goal(r['get_p99_ms'], 'get_p99_ms')}"),
        ("reconcile turn p50 / p99", f"<= {r['turn_p50_s']:g} / <= {r['turn_p99_s']:g} s over {r['turns']:.0f} turns "
                                     f"(mean {r['turn_mean_s']:.2f} s); engine {r['engine_share'] * 100:.0f} % of it "
                                     f"{goal(r['turn_p99_s'], 'turn_p99_s')}"),
        ("admissions", f"{r['admissions_per_s']:.1f}/s ({r['admitted']:.0f}); engine "
                       f"{r['engine_us_per_admission']:.0f} us of cycle per admission"),
        ("engine per decision", f"{r['engine_us_per_decision']:.0f} us of cycle per admission after "
                                f"{r['decision_cancelled']} running jobs ({BURST_SHARE:.0%}) were cancelled at once "
                                f"({r['decision_admitted']:.0f} admitted in {r['decision_cycles']:.0f} cycles)"),
        ("server CPU in steady", f"{r['server_cpu_s']:.1f} s (core {r['core_cpu_s']:.1f} s, API workers "
                                 f"{r['workers_cpu_s']:.1f} s); per submit "
                                 f"{r['server_cpu_s'] / max(1, r['submits']) * 1000:.1f} ms; the load generator "
                                 f"{r['client_cpu_s']:.1f} s, {r['client_cpu_s'] / max(1, r['submits']) * 1000:.1f} ms "
                                 f"a submit"),
        ("SQLite write lock in steady", f"core {r['core_write_wait_s']:.2f} s waited in {r['core_write_waits']:.0f} "
                                        f"write transactions, API workers {r['workers_write_wait_s']:.2f} s in "
                                        f"{r['workers_write_waits']:.0f}; p99 <= {r['write_wait_p99_s']:g} s"),
        ("cycle collector in steady", f"{r['gc_pause_s']:.2f} s in {r['gc_collections']:.0f} collections, full ones "
                                      f"{r['gc_full_pause_s']:.2f} s in {r['gc_full_collections']:.0f}; longest since "
                                      f"the start {r['gc_longest_s']:.2f} s"),
        ("server RSS / peak", f"{r['rss_mib']:.0f} / {r['rss_peak_mib']:.0f} MiB, all processes (core "
                              f"{r['core_rss_mib']:.0f} MiB) {goal(r['rss_peak_mib'], 'rss_mib')}"),
        ("/metrics scrape", f"{r['metrics_scrape_s'] * 1000:.0f} ms, {r['metrics_bytes'] / 1024:.0f} KiB"),
    ]
    if r["restart_healthz_s"] is None or r["restart_healthz_s"] != r["restart_healthz_s"]:  # NaN: not run
        rows.append(("restart (kill -9)", "skipped (--no-restart)"))
    else:
        rows.append(("restart (kill -9)", f"healthz {r['restart_healthz_s']:.1f} s, first admission "
                     f"{r['restart_first_admission_s']:.1f} s {goal(r['restart_first_admission_s'], 'restart_s')}"))
    if isinstance(paint, dict):
        for name, (fcp, shown) in paint.items():
            rows.append((f"dashboard {name}", f"first paint {fcp:.2f} s, data shown {shown:.2f} s "
                                              f"{goal(shown, 'paint_s')}"))
    else:
        rows.append(("dashboard", str(paint)))
    for path, took in r.get("dashboard_data_s", {}).items():
        rows.append((f"data {path}", f"{took:.2f} s, the slowest of 4 asks"))
    rows.append(("load average", f"{r['load_before']:.1f} before, {r['load_after']:.1f} after "
                                 f"({os.cpu_count()} cores)"))
    return table(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=10_000, help="nodes of 8 accelerators (default 10,000)")
    ap.add_argument("--teams", type=int, default=500, help="teams (default 500)")
    ap.add_argument("--waiting", type=int, default=100_000, help="jobs to keep waiting (default 100,000)")
    ap.add_argument("--rate", type=float, default=1000.0, help="single submits per second in steady (1,000)")
    ap.add_argument("--submit-threads", type=int, default=8, metavar="N",
                    help="client threads sending the steady phase's submits (default 8; 1-256): the client's "
                         "reach is N / the mean submit latency per second")
    ap.add_argument("--keys", action="store_true",
                    help="each steady submit with an Idempotency-Key of its own, as fairpod's CLI sends (default: none)")
    ap.add_argument("--seconds", type=float, default=30.0, help="length of the steady phase (default 30 s)")
    ap.add_argument("--min-duration", type=float, default=30.0, help="shortest job in seconds (default 30)")
    ap.add_argument("--max-duration", type=float, default=600.0, help="longest job in seconds (default 600)")
    ap.add_argument("--small", action="store_true",
                    help="100 nodes, 20 teams, 1,000 waiting, 50 submits/s for 3 s (seconds; the suite runs it)")
    ap.add_argument("--postgres", action="store_true", help="a private PostgreSQL server instead of SQLite")
    ap.add_argument("--no-browser", action="store_true", help="skip the dashboard's pages in Chromium")
    ap.add_argument("--no-restart", action="store_true", help="skip the kill -9 and restart")
    ap.add_argument("--api-workers", type=int, default=0, metavar="N",
                    help="fairpod up --api-workers N: submits, lists and gets served by N worker processes (default 0); "
                    "the server's CPU and RSS are then those of all its processes")
    ap.add_argument("--api-remote", type=int, default=0, metavar="N",
                    help="with --postgres: N 'fairpod api' processes on 127.0.0.2, 127.0.0.3, ... against the "
                         "database and the core, the steady phase's clients spread over them (default 0)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800, help="give up after this many seconds (default 1800)")
    ap.add_argument("-o", "--output", type=Path, help="also write the JSON line to this file")
    a = ap.parse_args()
    if a.small:
        a.nodes, a.teams, a.waiting, a.rate, a.seconds = 100, 20, 1000, 50.0, 3.0
        a.min_duration, a.max_duration = 1.0, 10.0
    if not 0 <= a.min_duration <= a.max_duration:
        print("datacenter: --min-duration must be >= 0 and <= --max-duration", file=sys.stderr)
        return 2
    for flag, v in (("--nodes", a.nodes), ("--teams", a.teams), ("--rate", a.rate), ("--seconds", a.seconds)):
        if v <= 0:
            print(f"datacenter: {flag} must be > 0, got {v:g}", file=sys.stderr)
            return 2
    if not 1 <= a.submit_threads <= 256:
        print(f"datacenter: --submit-threads must be from 1 to 256, not {a.submit_threads}", file=sys.stderr)
        return 2
    if a.api_remote and not (a.postgres and 0 < a.api_remote <= 8):
        print("datacenter: --api-remote N wants --postgres and N from 1 to 8", file=sys.stderr)
        return 2
    exit_on_sigterm()
    print(f"datacenter: {a.nodes} nodes x {ACC} in {TYPES} types, {a.teams} teams, {a.waiting} waiting, "
          f"{a.rate:g} submits/s for {a.seconds:g} s; timed executor (no processes); "
          f"{'PostgreSQL' if a.postgres else 'SQLite'}", flush=True)
    if a.postgres:
        with postgres() as url:
            r = run(a, url)
    else:
        r = run(a, None)
    print(report(r))
    line = json_line(r)
    print(line)
    if a.output:
        a.output.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
