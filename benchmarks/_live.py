"""Shared by the control-plane benchmarks: a real ``fairpod up --foreground`` in a temporary FAIRPOD_HOME on
a free loopback port, concurrent HTTP submitters, and small statistics helpers.

Every process a benchmark starts is remembered by PID and stopped by PID in ``LiveServer.stop`` (also on
Ctrl-C or an error: use it as a context manager); replicas the server's local executor left behind are
killed from their recorded PID files.
"""

from __future__ import annotations

import glob
import http.client
import itertools
import json
import math
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

UNFINISHED = ("Pending", "Running", "Preempted")


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that the clean-up of ``with LiveServer()`` and ``finally`` blocks runs
    (as it does on Ctrl-C)."""

    def _exit(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up short
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """``fairpod up --foreground`` with its own temporary home; ``stop()`` ends it and what it started."""

    def __init__(self, spec_yaml: str | None = None, *, executor: str = "local", keep: bool = False,
                 env: dict[str, str] | None = None, start_timeout: float = 60.0,
                 launcher: Sequence[str] = ("-m", "fairpod.cli.main"), extra: Sequence[str] = ()) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="fairpod-bench-"))
        self.start_timeout = start_timeout  # how long ``with LiveServer(...)`` waits for /healthz
        self.home = self.tmp / "home"
        self.keep = keep
        self.env = {**os.environ, "FAIRPOD_HOME": str(self.home), "FAIRPOD_CONFIG": str(self.tmp / "config.json"),
                    **(env or {})}
        self.env.pop("FAIRPOD_URL", None)
        self.env.pop("FAIRPOD_TOKEN", None)
        self.env.pop("FAIRPOD_DB_URL", None)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.executor = executor
        self.spec_path: Path | None = None
        if spec_yaml is not None:
            self.spec_path = self.tmp / "spec.yaml"
            self.spec_path.write_text(spec_yaml)
        self.proc: subprocess.Popen[bytes] | None = None
        self.token = ""
        self.launcher = list(launcher)  # what the interpreter runs, given ``up --foreground ...`` after it
        self.extra = list(extra)  # more arguments of ``fairpod up`` (``--api-workers 2``)
        self.addresses = ["127.0.0.1"]  # where RawClients connect, in turn (datacenter.py --api-remote: others)
        self.spread = itertools.count()
        self.more_pids: list[int] = []  # processes counted as the server's besides its own (``fairpod api``)

    def __enter__(self) -> LiveServer:
        try:
            self.start(self.start_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None and exc_type is not KeyboardInterrupt:
            alive = self.proc is not None and self.proc.poll() is None
            rc = None if self.proc is None else self.proc.returncode
            print(f"benchmark failed; the server is {'running' if alive else f'gone (exit {rc})'}; "
                  f"the end of its log:\n{self.log_tail()}", file=sys.stderr)
        self.stop()

    def start(self, timeout: float = 60.0) -> None:
        args = [sys.executable, *self.launcher, "up", "--foreground", "--port", str(self.port)]
        if self.spec_path is not None:
            args += ["--spec", str(self.spec_path)]
        if self.executor != "local":
            args += ["--executor", self.executor]
        args += self.extra
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.tmp / "server.out", "ab") as log:
            self.proc = subprocess.Popen(args, env=self.env, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError(f"the server did not answer /healthz within {timeout:g} s:\n{self.log_tail()}")
        self.token = json.loads((self.tmp / "config.json").read_text())["token"]

    def log_tail(self, n: int = 3000) -> str:
        try:
            return (self.tmp / "server.out").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def client(self, timeout: float = 60.0) -> httpx.Client:
        return httpx.Client(base_url=self.url + "/api/v1", timeout=timeout,
                            headers={"Authorization": f"Bearer {self.token}"})

    def server_pids(self) -> list[int]:
        """The server's processes: ``fairpod up``'s, and its API workers' (``--api-workers``: api-workers.pid)."""
        pids = [self.proc.pid] if self.proc is not None else []
        try:
            lines = (self.home / "api-workers.pid").read_text().splitlines()
        except OSError:
            lines = []
        return pids + [int(line.split()[1]) for line in lines if line and not line.startswith("core ")] + self.more_pids

    def server_cpu_seconds(self) -> float | None:
        """User + system CPU time of the server's processes so far (from /proc), None if it is gone."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        return sum(proc_cpu_seconds(p) or 0.0 for p in self.server_pids())

    def stop(self) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=30)
        finally:
            try:
                self._kill_replicas()
            finally:
                if not self.keep:
                    shutil.rmtree(self.tmp, ignore_errors=True)

    def _kill_replicas(self) -> None:
        """SIGKILL every supervisor and command the local executor recorded, by PID (checked against its
        start time, so a reused PID is left alone)."""
        from fairpod.executors import procs

        for f in list((self.home / "runs").glob("*/*/*/*.pid")):
            try:
                pid_s, start_s = f.read_text().split()[:2]
                pid, start = int(pid_s), int(start_s)
            except (OSError, ValueError):
                continue
            if procs.start_time(pid) == start:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def marks_dir(server: LiveServer) -> Path:
    """A directory where the replicas write their marks (start and end lines, their own clocks) and the benchmark
    reads them: jobs get it as their ``workdir``, which their view keeps (under the default sandbox the host's
    ``/tmp`` is private to each replica: marks written to the benchmark's own folder there went nowhere and the
    figures counted nothing), and anyone may write it (replicas run as the per-team users when fairpod is root)."""
    d = server.tmp / "marks"
    d.mkdir(exist_ok=True)
    d.chmod(0o1777)
    return d


def proc_cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def machine_cpu_seconds() -> float:
    """CPU seconds (all cores, not idle/iowait) since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    return (sum(parts[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class RawClient:
    """A light HTTP/1.1 keep-alive client (the standard library's http.client): about a third of httpx's CPU
    per request, which matters when the client shares two cores with the server it measures."""

    def __init__(self, server: LiveServer, timeout: float = 60.0) -> None:
        self.port = server.port
        self.timeout = timeout
        self.headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json",
                        "Accept": "application/json"}
        # the server's addresses in turn, one per client (several API processes behind no balancer: the clients
        # spread over them as a load balancer would)
        self.host = server.addresses[next(server.spread) % len(server.addresses)]
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        for attempt in range(2):
            try:
                self.conn.request(method, "/api/v1" + path, body=data,
                                  headers={**self.headers, **headers} if headers else self.headers)
                r = self.conn.getresponse()
                raw = r.read()
                return r.status, (json.loads(raw) if raw else None)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.conn.close()  # a dropped keep-alive connection: reconnect once
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


def submit_all(server: LiveServer, bodies: Sequence[dict[str, Any]], threads: int,
               on_submitted: Callable[[int, float, float, dict[str, Any]], None] | None = None,
               pace: float | None = None, until: float | None = None,
               keys: bool = False) -> list[tuple[float, float, int]]:
    """POST every body to /jobs from ``threads`` concurrent clients, in order of the list (each thread takes
    the next body). ``pace``: jobs per second in all (open loop: job i is sent no earlier than i / pace after
    the start). ``until`` (with ``pace``): seconds after the start past which a client that is behind its pace
    sends no more (what was sent is the figure). ``keys``: each with an ``Idempotency-Key`` of its own, as
    fairpod's CLI sends one with each submit. Returns, per body sent, (time before the request, time after
    the response, job id)."""
    out: list[tuple[float, float, int] | None] = [None] * len(bodies)
    nxt = iter(range(len(bodies)))
    lock = threading.Lock()
    errors: list[str] = []
    t_start = time.time()

    def work() -> None:
        c = RawClient(server)
        try:
            while not errors:
                with lock:
                    i = next(nxt, None)
                if i is None:
                    return
                if pace:
                    delay = t_start + i / pace - time.time()
                    if delay > 0:
                        time.sleep(delay)
                    elif until is not None and time.time() > t_start + until:
                        return
                t0 = time.time()
                try:
                    status, job = c.request("POST", "/jobs", bodies[i], {"Idempotency-Key": f"{bodies[i]['name']}-{i}"}
                                            if keys else None)
                except (OSError, http.client.HTTPException, ValueError) as e:
                    errors.append(f"{bodies[i]['name']}: {e!r}")
                    return
                t1 = time.time()
                if status != 201:
                    errors.append(f"{bodies[i]['name']}: HTTP {status} {str(job)[:300]}")
                    return
                out[i] = (t0, t1, int(job["id"]))
                if on_submitted is not None:
                    on_submitted(i, t0, t1, job)
        finally:
            c.close()

    ts = [threading.Thread(target=work, name=f"submit-{k}", daemon=True) for k in range(max(1, threads))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} submit(s) failed; first: {errors[0]}")
    return [o for o in out if o is not None]


def run_each(n: int, clients: int, one: Callable[[int], str | None]) -> str | None:
    """``one(0)`` .. ``one(n - 1)`` from ``clients`` threads at a time (1: one after another, as a shell loop);
    each returns an error message or None. Stops handing out work at the first error and returns it."""
    nxt = iter(range(n))
    lock = threading.Lock()
    errors: list[str] = []

    def work() -> None:
        while not errors:
            with lock:
                i = next(nxt, None)
            if i is None:
                return
            error = one(i)
            if error is not None:
                errors.append(error)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors[0] if errors else None


def self_cpu_seconds() -> float:
    """CPU time of this (the benchmark's client) process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def wait_all_finished(server: LiveServer, timeout: float, interval: float = 0.1,
                      progress: Callable[[float], None] | None = None) -> float:
    """Poll until no job is Pending, Running or Preempted (one cheap ``limit=1`` query per turn); returns
    the client time it was first seen so. Raises TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    with server.client() as c:
        for _ in range(int(timeout / interval) + 10):
            r = c.get("/jobs", params={"state": list(UNFINISHED), "limit": 1})
            r.raise_for_status()
            if r.json()["count"] == 0:
                return time.time()
            if progress is not None:
                progress(time.time())
            if time.monotonic() > deadline:
                break
            if server.proc is not None and server.proc.poll() is not None:
                raise RuntimeError(f"the server died:\n{server.log_tail()}")
            time.sleep(interval)
    raise TimeoutError(f"jobs still unfinished after {timeout:g} s")


def fetch_jobs(server: LiveServer) -> list[dict[str, Any]]:
    """Every job as the server records it (id, state, submit_time, started_at, finished_at, ...)."""
    with server.client(timeout=300) as c:
        r = c.get("/jobs", params={"limit": 100_000})
        r.raise_for_status()
        return list(r.json()["jobs"])


def percentile(xs: Iterable[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of the values; nan if there are none."""
    s = sorted(xs)
    if not s:
        return math.nan
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k]


def table(rows: Sequence[tuple[str, str]]) -> str:
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(w)}  {v}" for k, v in rows)


def json_line(d: dict[str, Any]) -> str:
    def clean(v: Any) -> Any:
        if isinstance(v, float):
            return None if math.isnan(v) or math.isinf(v) else round(v, 6)
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(d), sort_keys=False)


@contextmanager
def postgres() -> Iterator[str]:
    """A private PostgreSQL server in a temporary directory (Unix socket only), stopped at the end: its URL
    (``--postgres`` of datacenter.py and crash.py)."""
    def pg_bin(name: str) -> str:
        found = shutil.which(name) or (sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [None])[-1]
        if not found:
            raise SystemExit(f"--postgres: no {name} found (install PostgreSQL's server binaries)")
        return found

    initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    d = tempfile.mkdtemp(prefix="fairpod-bench-pg-")
    if prefix:
        shutil.chown(d, "postgres")
    data = os.path.join(d, "data")
    port = 54000 + os.getpid() % 1000
    try:
        subprocess.run([*prefix, initdb, "-A", "trust", "-U", "fairpod", "-D", data], check=True,
                       capture_output=True, timeout=120)
        subprocess.run([*prefix, pg_ctl, "-D", data, "-o", f"-k {d} -c listen_addresses='' -p {port}",
                        "-l", os.path.join(d, "log"), "-w", "start"], check=True, capture_output=True, timeout=60)
        yield f"postgresql+psycopg://fairpod@/postgres?host={d}&port={port}"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", data, "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(d, ignore_errors=True)
