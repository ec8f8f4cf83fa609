"""A real fairpod server (``fairpod up --foreground``) in a temporary FAIRPOD_HOME, on a free loopback port."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from fairpod import sandbox
from fairpod.sandbox import cgroups

from .. import httpclient, reaper
from ..executors.helpers import stop_runs
from ..ports import free_port
from .inproc import InProc
from .inproc_api import Api


def wait_for(pred: Callable[[], Any], timeout: float = 20.0, what: str = "condition",
             progress: Callable[[], Any] | None = None, limit: float = 900.0) -> Any:
    """Poll ``pred`` until it is truthy. Without ``progress``, for at most ``timeout`` seconds. With it (for work
    that takes as long as the machine is slow, such as training), ``timeout`` bounds a stall: the wait goes on
    while ``progress()`` keeps changing (a log that grows), up to ``limit`` seconds in all."""
    start = time.monotonic()
    deadline = start + timeout
    last = seen = None
    checked = 0.0
    # progress is asked an eighth of ``timeout`` apart (at least 1 s), and once more before the wait gives up: it may
    # take seconds (Server.activity reads all of /proc), and asked every second it left a quick condition polled
    # once every few seconds on a loaded machine, which missed a window of seconds in a training test
    every = max(1.0, timeout / 8)
    pause = 0.02  # doubled up to 0.25 s: a quick condition is seen at once, a long wait (training) asks a live
    # server 4 times a second instead of 10 (each ask costs the server and this process CPU the others wait for)
    while (now := time.monotonic()) - start < limit:
        last = pred()
        if last:
            return last
        if progress is not None and (now - checked >= every or now >= deadline):
            checked = now
            if (p := progress()) != seen:
                seen, deadline = p, now + timeout
        if now >= deadline:
            break
        time.sleep(pause)
        pause = min(0.25, pause * 2)
    stalled = f" (no progress for {timeout:g} s; last progress: {seen!r})" if progress is not None else ""
    raise AssertionError(f"timed out after {time.monotonic() - start:.0f} s waiting for {what}{stalled}; "
                         f"last value: {last!r}")


SEED_SPEC = Path(__file__).resolve().parents[2] / "examples" / "seed" / "spec.yaml"


def fake_nvml(path: Path, gpus: list[dict[str, Any]]) -> Path:
    """A FAKE NVML file (tests only; see fairpod.executors.nvml) listing ``gpus``."""
    path.write_text(json.dumps({"gpus": gpus}))
    return path


def _ticks(pid: int) -> int:
    """The CPU time ``pid`` has used (clock ticks: utime + stime); 0 when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


@dataclass(frozen=True)
class Activity:
    """What :meth:`Server.activity` measured: equal when nothing moved; its repr ends a stalled wait's message with
    the end of each replica's log (what it was doing when it stopped)."""

    log_bytes: int
    cpu_ticks: int
    cgroup_cpu_ticks: int
    tails: dict[str, str] = field(compare=False, default_factory=dict)
    jobs: str = field(compare=False, default="")

    def __repr__(self) -> str:
        logs = "".join(f"\n--- {name} (last 400 bytes) ---\n{tail}" for name, tail in sorted(self.tails.items()))
        return (f"log bytes {self.log_bytes}, CPU ticks of processes with this API URL {self.cpu_ticks}, "
                f"CPU ticks of processes in replica cgroups {self.cgroup_cpu_ticks}; jobs: {self.jobs}{logs}")


class PortTaken(AssertionError):
    """The server exited because its port was taken."""


class Server:
    """``fairpod up`` in a private home. Whatever GPUs the host has, the server sees the FAKE NVML of
    ``self.env["FAIRPOD_FAKE_NVML"]`` (none by default), so no test depends on the machine it runs on."""

    def __init__(self, tmp: Path, spec: Path | None = None) -> None:
        self.home = tmp / "home"
        inherited = {k: v for k, v in os.environ.items() if k not in ("FAIRPOD_URL", "FAIRPOD_TOKEN", "FAIRPOD_DB_URL")}
        self.env = {**inherited, "FAIRPOD_HOME": str(self.home), "FAIRPOD_CONFIG": str(tmp / "config.json"),
                    "FAIRPOD_FAKE_NVML": str(fake_nvml(tmp / "no-gpus.json", []))}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.spec = spec
        self.db: str | None = None  # a database URL; default SQLite under the home
        self.executor: str | None = None  # --executor; default local
        self.proc: subprocess.Popen | None = None
        self.extra: list[str] = []  # more arguments for fairpod up
        reaper.pidfile(self.home / "server.pid")  # however it is started (also `fairpod up` as a daemon)
        reaper.runs(self.home / "runs")

    def cli(self, *args: str, token: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        env = dict(self.env)
        if token:
            env["FAIRPOD_TOKEN"] = token
        r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", *args], env=env, capture_output=True,
                           text=True, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError(f"fairpod {' '.join(args)} failed ({r.returncode}): {r.stderr}{r.stdout}")
        return r

    def start(self) -> None:
        """Start the server and wait until it answers. The first start that finds its port taken (another test
        drew the same one between the probe and the bind) draws another, at most 5 times; a restart keeps the
        port the test has already told its clients."""
        for _ in range(4 if self.proc is None else 0):
            try:
                return self._start()
            except PortTaken:
                self.port = free_port()
                self.url = f"http://127.0.0.1:{self.port}"
        self._start()

    def _start(self) -> None:
        args = [sys.executable, "-m", "fairpod.cli.main", "up", "--foreground", "--port", str(self.port)]
        if self.spec:
            args += ["--spec", str(self.spec)]
        if self.db:
            args += ["--db", self.db]
        if self.executor:
            args += ["--executor", self.executor]
        args += self.extra
        self.home.mkdir(parents=True, exist_ok=True)
        log = open(self.home.parent / "server.out", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(args, env=self.env, stdout=log, stderr=log, start_new_session=True)
        reaper.started(self.proc.pid)
        # a stall of 30 s fails; a server still starting (its CPU time grows: imports, a Ray driver's connect on
        # a loaded machine) is waited for, up to the wait's limit
        wait_for(self._healthy, 30, "the server to answer /healthz", self._cpu)
        self.token = json.loads(Path(self.env["FAIRPOD_CONFIG"]).read_text())["token"]

    def _cpu(self) -> int:
        """The server process's CPU time so far (clock ticks; 0 once it is gone)."""
        return _ticks(self.proc.pid) if self.proc else 0

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            out = (self.home.parent / "server.out").read_text()
            if f"cannot listen on 127.0.0.1:{self.port}: Address already in use" in out:
                raise PortTaken(out[-3000:])
            raise AssertionError(f"server exited {self.proc.returncode}:\n{out[-3000:]}")
        try:
            r = httpclient.get(self.url + "/healthz", timeout=1)
        except httpx.HTTPError:
            return False
        # our own server: another test's server that drew the same port answers /healthz too, before ours
        # finds the port taken and exits
        return r.status_code == 200 and r.json().get("pid") == self.proc.pid

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)

    def api(self, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token or self.token}", **kw.pop("headers", {})}
        try:
            return httpclient.request(method, self.url + "/api/v1" + path, headers=headers, timeout=30, **kw)
        except httpx.ConnectError as e:  # say whether the server is gone (and how) or only not answering
            raise AssertionError(f"{method} {path}: {e}; {self.gone()}") from e

    def gone(self) -> str:
        """How the server process stands, with the end of its output (for a failure's message)."""
        code = self.proc.poll() if self.proc else None
        try:
            out = (self.home.parent / "server.out").read_text(errors="replace")[-2000:]
        except OSError:
            out = "(no output)"
        how = "still running" if self.proc and code is None else f"exited {code}"
        return f"the server (pid {self.proc.pid if self.proc else None}) {how}; its output ends:\n{out}"

    def job(self, name: str, token: str | None = None) -> dict[str, Any]:
        r = self.api("GET", f"/jobs/{name}", token)
        assert r.status_code == 200, r.text
        return r.json()

    def replica_logs(self, name: str, last: int = 3000) -> dict[str, str]:
        """The last ``last`` characters of each replica log of job ``name`` (every attempt), by its path under the
        home's runs (``JOB-ID/ATTEMPT/RANK/output.log``): for a failed wait's message."""
        runs = self.home / "runs"
        return {str(p.relative_to(runs)): p.read_text(errors="replace")[-last:]
                for p in sorted(runs.glob(f"{name}-{self.job(name)['id']}/*/*/output.log"))}

    def submit(self, token: str | None = None, **spec: Any) -> dict[str, Any]:
        r = self.api("POST", "/jobs", token, json=spec)
        assert r.status_code == 201, r.text
        return r.json()

    def wait_state(self, name: str, state: str, timeout: float = 30.0,
                   progress: Callable[[], Any] | None = None) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def reached() -> dict[str, Any] | bool:
            seen.update(self.job(name))
            return seen["state"] == state and dict(seen)
        try:
            return wait_for(reached, timeout, f"{name} to be {state}", progress)
        except AssertionError as e:  # say where the job was: its state and its last events
            events = [f"{ev.get('kind')}: {ev.get('message')}" for ev in seen.get("events", [])[-6:]]
            raise AssertionError(f"{e}; the job was {seen.get('state')!r} (reason {seen.get('reason')!r}), "
                                 f"last events: {events}") from None

    def activity(self) -> Activity:
        """A progress measure for ``wait_for``: what the replicas have written to their logs, the CPU time their
        live processes have used (clock ticks; a replica's processes carry this server's ``FAIRPOD_API_URL``), and
        the CPU time of the processes in the replicas' cgroups (ticks; also a container's processes, whose cgroup is
        made inside the replica's, and processes whose environment this process may not read). One or the other grows
        while they work: starting 8 training processes on a loaded machine prints nothing for minutes while they
        import torch."""
        written = 0
        in_groups: set[int] = set()
        tails: dict[str, str] = {}
        try:
            hier: cgroups.Hierarchy | None = cgroups.detect()
        except cgroups.CgroupError:
            hier = None
        for rdir in (self.home / "runs").glob("*/*/*"):
            try:
                log = rdir / "output.log"
                written += log.stat().st_size
                with log.open("rb") as f:
                    f.seek(max(0, f.seek(0, os.SEEK_END) - 400))
                    tails[str(rdir.relative_to(self.home / "runs"))] = f.read().decode(errors="replace")
            except OSError:
                pass
            if hier is not None and rdir.parent.name.isdigit() and rdir.name.isdigit():
                in_groups.update(hier.group(sandbox.group_name(rdir.parent.parent.name, rdir.parent.name, rdir.name, rdir)).pids())
        ticks = 0
        mark = f"FAIRPOD_API_URL={self.url}\0".encode()
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                if mark not in (d / "environ").read_bytes():
                    continue
            except OSError:  # gone meanwhile, or not ours to read
                continue
            ticks += _ticks(int(d.name))
        return Activity(written, ticks, sum(_ticks(pid) for pid in in_groups), tails, self._jobs_line())

    def _jobs_line(self) -> str:
        """Each job's state, preemptions, last reported step and reason, for a stalled wait's message."""
        try:
            jobs = [self.api("GET", f"/jobs/{j['id']}").json() for j in self.api("GET", "/jobs?limit=20").json()["jobs"]]
            return "; ".join(f"{j['name']}: {j['state']} preemptions {j.get('preemptions')} step "
                             f"{(j.get('checkpoint') or {}).get('step')} ({j.get('reason') or ''})" for j in jobs)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
            return f"jobs not read: {e!r}"

    def kill_replicas(self) -> None:
        """Stop every replica and supervisor this server's executor started (by recorded PID), and remove their
        cgroups (fairpod.sandbox: a supervisor killed so leaves its replica's)."""
        stop_runs(self.home / "runs")


def running(tmp_path: Path, spec: Path | str = SEED_SPEC,
            before_start: Callable[[Server], None] | None = None) -> Iterator[Server]:
    """A started server on ``spec`` (a file, or a spec's YAML text), stopped with its replicas afterwards; a
    fixture yields from it. ``before_start(server)`` runs first, its home made (to write into its database)."""
    if isinstance(spec, str):
        path = tmp_path / "spec.yaml"
        path.write_text(spec)
        spec = path
    s = Server(tmp_path, spec)
    if before_start is not None:
        s.home.mkdir(parents=True, exist_ok=True)
        before_start(s)
    s.start()
    try:
        yield s
    finally:
        s.kill(signal.SIGTERM)
        s.kill_replicas()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path)


@pytest.fixture
def h(tmp_path: Path) -> Iterator[InProc]:
    """An in-process control plane (``inproc.InProc``: real SQLite, the timed executor, a FAKE clock)."""
    h = InProc(tmp_path)
    yield h
    h.close()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    """The real app in-process (``api.Api``: ``runtime.build`` over SQLite in tmp_path, on TestClient) with admin,
    member, other-team member and viewer tokens."""
    a = Api(tmp_path)
    yield a
    a.close()


@pytest.fixture(scope="module")
def shared_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """One ``api`` for the tests of a module that change nothing (each should check that it did not)."""
    a = Api(tmp_path_factory.mktemp("api"))
    yield a
    a.close()
