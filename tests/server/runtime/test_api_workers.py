"""``fairpod up --api-workers 2`` (fairpod.server.runtime.workers): a live server shared by the module, two API
worker processes on the public port and the core on its private one. Submits, list-jobs and get-job are answered
by a worker from the database; the core admits what the workers committed; the core stopped, a worker killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from fairpod.executors.base import Traits
from fairpod.server.runtime import heap
from fairpod.server.runtime.daemon import initialize
from fairpod.server.runtime.wiring import build_worker

from ... import httpclient
from ..conftest import SEED_SPEC, Server, running, wait_for
from ..inproc_api import Api

WORKER = "fairpod-api-worker"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    def workers(s: Server) -> None:
        s.extra = ["--api-workers", "2"]

    yield from running(tmp_path_factory.mktemp("workers"), before_start=workers)


def pids(s: Server) -> tuple[int, int, dict[int, int]]:
    """(the core's pid, its private port, worker index -> pid) from the home's api-workers.pid."""
    core, port, out = 0, 0, {}
    for line in (s.home / "api-workers.pid").read_text().splitlines():
        a, b, *rest = line.split()
        if a == "core":
            core, port = int(b), int(rest[0])
        else:
            out[int(a)] = int(b)
    return core, port, out


def _connections(s: Server) -> dict[str, int]:
    """The server port's established connections now: socket (as a process's fd links to it) -> the bytes a
    client sent that the server has not read yet."""
    port = f"{urlsplit(s.url).port:04X}"
    held: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for row in f.read().splitlines()[1:]:
                cols = row.split()
                if cols[1].endswith(f":{port}") and cols[3] == "01":  # ESTABLISHED, on the server's port
                    held[f"socket:[{cols[9]}]"] = int(cols[4].split(":")[1], 16)  # tx_queue:rx_queue
    return held


def _held_by(pid: int, held: dict[str, int]) -> list[int]:
    """The unread bytes of each of ``held`` that process ``pid`` holds."""
    try:
        return [held[link] for fd in os.listdir(f"/proc/{pid}/fd") if (link := _link(f"/proc/{pid}/fd/{fd}")) in held]
    except OSError:
        return []


def busiest(s: Server, workers: dict[int, int]) -> int:
    """The worker (index) holding the most client connections now: the kernel hands each connection to one worker,
    and under load one worker may have taken them all; a kill of the other would meet no submit."""
    held = _connections(s)
    return max(sorted(workers), key=lambda i: len(_held_by(workers[i], held)))


def kill_amid_a_submit(s: Server, workers: dict[int, int]) -> int:
    """kill -9 of the busiest worker while a submit waits for its answer there; its index. The worker is stopped
    first (SIGSTOP), then killed once a request waits unread on one of its connections: a client's next submit on
    its kept connection. A kill at a random moment may fall between its clients' requests (the clients, slower
    than the worker on a loaded host, held no request there: seen once), and no client sees that crash. If none
    comes within 10 s, each of its clients is waiting for an answer already (a client sends its next request only
    once it has its answer), and the kill meets those."""
    victim = busiest(s, workers)
    pid = workers[victim]
    os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(200):  # 10 s at most
            if any(_held_by(pid, _connections(s))):
                break
            time.sleep(0.05)
    finally:
        os.kill(pid, signal.SIGKILL)
    return victim


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def fresh(s: Server, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
    """A request on a new connection (the kernel hands each connection to one worker)."""
    headers = {"Authorization": f"Bearer {token or s.token}", **kw.pop("headers", {})}
    with httpx.Client(timeout=30) as c:
        return c.request(method, s.url + "/api/v1" + path, headers=headers, **kw)


def job(name: str, team: str = "john", **more: Any) -> dict[str, Any]:
    return {"name": name, "team": team, "instance_type": "ml.g5.12xlarge", "nodes": 1, "accelerators": 1,
            "command": ["true"], **more}


def test_a_submit_through_a_worker_is_admitted_and_runs(srv: Server) -> None:
    core, _, workers = pids(srv)
    r = srv.api("POST", "/jobs", json=job("w-run"))
    assert r.status_code == 201, r.text
    assert int(r.headers[WORKER]) in workers.values()  # answered by a worker, not the core
    assert r.json()["state"] == "Pending"
    done = srv.wait_state("w-run", "Succeeded")
    assert [e["kind"] for e in done["events"]][:1] == ["JobSubmitted"]
    assert core == srv.proc.pid  # type: ignore[union-attr]
    # the worker's commit woke the core with a datagram (server.runtime.wakes) that carried its write-lock figures
    auth = {"Authorization": f"Bearer {srv.token}"}
    said = httpclient.request("GET", srv.url + "/metrics", headers=auth, timeout=30).text
    assert f'fairpod_store_write_wait_seconds_count{{process="worker-{r.headers[WORKER]}"}}' in said, said[-3000:]
    wake = httpclient.request("POST", srv.url + "/internal/wake", headers=auth, timeout=30)
    assert wake.status_code in (404, 405), wake.text  # no wake over HTTP any more


def test_each_worker_runs_the_cycle_collector_at_the_servers_thresholds(srv: Server) -> None:
    """A worker sets the core's thresholds (server/runtime/heap.py: Python's own made a worker spend 7 % of its
    CPU in collections) and freezes what its app built; it says so in the server's log."""
    _, _, workers = pids(srv)
    want = ",".join(map(str, heap.THRESHOLDS))
    out = srv.home.parent / "server.out"
    for i in workers:  # (a worker may still be starting: the server answers once one of them does)
        wait_for(lambda i=i: f"api-worker-{i}: cycle collector thresholds {want}; " in out.read_text(errors="replace"),
                 60, f"worker {i}'s line in the server's log")


def test_list_and_get_through_a_worker(srv: Server) -> None:
    _, _, workers = pids(srv)
    srv.submit(**job("w-list", command=["sleep", "0"]))
    r = srv.api("GET", "/jobs?team=john")
    assert r.status_code == 200 and int(r.headers[WORKER]) in workers.values()
    assert "w-list" in [j["name"] for j in r.json()["jobs"]]
    g = srv.api("GET", "/jobs/w-list?team=john")
    assert g.status_code == 200 and g.json()["name"] == "w-list" and int(g.headers[WORKER]) in workers.values()
    # a route the worker does not serve is the core's answer, passed on unchanged
    ev = srv.api("GET", f"/jobs/{g.json()['id']}/events")
    assert ev.status_code == 200 and ev.json()["events"][0]["kind"] == "JobSubmitted"


def test_errors_through_a_worker_are_the_cores(srv: Server) -> None:
    """An unknown token, a job the cluster cannot hold, a field out of range, another team's submit: a worker
    answers as the core answers (asked on its private port)."""
    _, port, _ = pids(srv)
    member = srv.api("POST", "/users", json={"name": "mia", "role": "member", "teams": ["john"]}).json()["token"]
    asks: list[tuple[str | None, dict[str, Any]]] = [
        ("not-a-token", job("w-bad")),
        (None, job("w-bad", nodes=40)),
        (None, job("w-bad", accelerators=-1)),
        (None, {**job("w-bad"), "instance_type": "ml.nope"}),
        (member, job("w-bad", team="smith")),
    ]
    for token, body in asks:
        via = srv.api("POST", "/jobs", token, json=body)
        headers = {"Authorization": f"Bearer {token or srv.token}"}
        direct = httpx.post(f"http://127.0.0.1:{port}/api/v1/jobs", json=body, headers=headers, timeout=30)
        assert WORKER in via.headers and (via.status_code, via.json()) == (direct.status_code, direct.json())
        assert via.status_code in (400, 401, 403, 422), via.text
    assert srv.api("GET", "/jobs/w-bad?team=john").status_code == 404


def on_worker(s: Server, pid: int, method: str, path: str, **kw: Any) -> httpx.Response:
    """A request that worker ``pid`` answers: the others are stopped (SIGSTOP) meanwhile, so only it accepts."""
    others = [p for p in pids(s)[2].values() if p != pid]
    for p in others:
        os.kill(p, signal.SIGSTOP)
    try:
        return fresh(s, method, path, **kw)
    finally:
        for p in others:
            os.kill(p, signal.SIGCONT)


def test_an_idempotency_key_repeated_on_two_workers_gives_one_job(srv: Server) -> None:
    first, second = pids(srv)[2][0], pids(srv)[2][1]
    key = {"Idempotency-Key": "same-key-1"}
    a = on_worker(srv, first, "POST", "/jobs", json=job("w-idem"), headers=key)
    b = on_worker(srv, second, "POST", "/jobs", json=job("w-idem"), headers=key)
    assert (a.status_code, int(a.headers[WORKER])) == (201, first), a.text
    assert (b.status_code, int(b.headers[WORKER]), b.headers.get("Idempotent-Replayed")) == (200, second, "true")
    assert a.json()["id"] == b.json()["id"]
    listed = [j for j in srv.api("GET", "/jobs?team=john&limit=0").json()["jobs"] if j["name"] == "w-idem"]
    assert len(listed) == 1


def test_a_submit_accepted_while_the_core_is_stopped_is_admitted_when_it_returns(srv: Server) -> None:
    assert srv.proc is not None
    os.kill(srv.proc.pid, signal.SIGSTOP)
    try:
        r = srv.api("POST", "/jobs", json=job("w-stopped"))
        assert r.status_code == 201, r.text
        got = srv.api("GET", "/jobs/w-stopped?team=john")  # answered by a worker while the core is stopped
        assert got.status_code == 200 and got.json()["state"] == "Pending"
    finally:
        os.kill(srv.proc.pid, signal.SIGCONT)
    srv.wait_state("w-stopped", "Succeeded")


# -- crashes while clients submit: kill -9 of a worker, of the core, of both (issue 47's "Must show") ---------------

FINISHED = ("Succeeded", "Failed", "Cancelled")


class Storm:
    """``threads`` clients submitting ``each`` jobs one after another, as fairpod's CLI submits
    (``cli.client.Client.submit``): one Idempotency-Key per job, sent again with the same body while the connection
    fails (refused, reset, cut before the answer, timed out), never after an HTTP answer; bounded by ``patience``
    seconds without an answer per job. Each job's replica appends its key (``FAIRPOD_JOB``, name-id) to ``ran``,
    so what ran is counted apart from the server's records.

    Used as ``with Storm(...):`` around a crash, the clients go on submitting past ``each`` until the ``with``
    block is done (at most 25 x ``each`` jobs each), so the crash always falls among submits in flight: a storm
    that ended before its crash (seen once, on a loaded host) proves nothing."""

    def __init__(self, s: Server, tag: str, ran: Path, threads: int = 20, each: int = 4,
                 patience: float = 90.0, url: str | None = None) -> None:
        self.s, self.tag, self.ran, self.each, self.patience = s, tag, ran, each, patience
        self.url = url or s.url  # where the clients submit (``fairpod api``'s address); the checks ask ``s``
        # the replicas' workdir, which their view keeps and the team's user may write (benchmarks/_live.py marks_dir)
        ran.parent.mkdir(exist_ok=True)
        ran.parent.chmod(0o1777)
        ran.touch(mode=0o666)
        ran.chmod(0o666)
        self.accepted: dict[str, int] = {}  # name -> the id of its 2xx answer
        self.replayed = self.retries = 0
        self.errors: list[str] = []
        self.some = threading.Event()  # a quarter of the jobs answered: a crash now falls among submits
        self.go_on = False  # (``with``) the clients submit on until ``crashed`` is set
        self.crashed = threading.Event()
        self.names: set[str] = set()  # every job a client submitted
        self._mu = threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(threads)]

    def __enter__(self) -> Storm:
        self.go_on = True
        self.start()
        assert self.some.wait(60), f"no submit answered in 60 s: {self.errors}"
        return self

    def start(self) -> None:
        """The clients started (``with`` also waits for a quarter of the answers)."""
        for t in self._threads:
            t.start()

    def __exit__(self, *exc: object) -> None:
        self.crashed.set()
        for t in self._threads:
            t.join(timeout=self.patience * 25 * self.each + 30)
        assert not any(t.is_alive() for t in self._threads), "a client did not finish"

    def _client(self, i: int) -> None:
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {self.s.token}"}) as c:
            k = 0
            while k < self.each or (self.go_on and not self.crashed.is_set() and k < 25 * self.each):
                self._submit(c, f"{self.tag}-{i}-{k}")
                k += 1

    def _submit(self, c: httpx.Client, name: str) -> None:
        body = job(name, command=["sh", "-c", f'echo "$FAIRPOD_JOB" >> {self.ran.name}'], workdir=str(self.ran.parent))
        key = {"Idempotency-Key": f"{name}-{os.urandom(4).hex()}"}
        with self._mu:
            self.names.add(name)
        deadline = time.monotonic() + self.patience
        for _ in range(1000):
            try:
                r = c.post(self.url + "/api/v1/jobs", json=body, headers=key)
            except httpx.TransportError:
                with self._mu:
                    self.retries += 1
                if time.monotonic() > deadline:
                    break
                time.sleep(0.25)  # the CLI's first pause (SUBMIT_RETRIES)
                continue
            with self._mu:
                if r.status_code in (200, 201):
                    self.accepted[name] = int(r.json()["id"])
                    self.replayed += r.headers.get("Idempotent-Replayed") == "true"
                    if len(self.accepted) * 4 >= len(self._threads) * self.each:
                        self.some.set()
                else:
                    self.errors.append(f"{name}: HTTP {r.status_code} {r.text[:300]}")
            return
        with self._mu:
            self.errors.append(f"{name}: no answer for {self.patience:g} s")

    def check(self) -> None:
        """0 lost (a 2xx answer's job missing or never finished), 0 doubled (two jobs of one name, a replica
        started twice), 0 stuck (unfinished): every job answered Succeeded and ran exactly once."""
        print(f"{self.tag}: {len(self.accepted)} jobs, {self.retries} retries, {self.replayed} answered 200 (replayed)")
        assert not self.errors, self.errors[:5]
        assert self.retries, "no client saw the crash"  # a crash no submit met proves nothing
        names = set(self.accepted)
        assert names == self.names and len(names) >= len(self._threads) * self.each

        def mine() -> list[dict[str, Any]]:
            return [j for j in self.s.api("GET", "/jobs?team=john&limit=0").json()["jobs"] if j["name"] in names]

        def finished() -> list[dict[str, Any]] | bool:
            jobs = mine()
            return len(jobs) >= len(names) and all(j["state"] in FINISHED for j in jobs) and jobs

        try:
            jobs = wait_for(finished, 30, "every job to finish", lambda: sum(j["state"] in FINISHED for j in mine()))
        except AssertionError:
            jobs = mine()
        listed = Counter(j["name"] for j in jobs)
        lost = sorted(names - set(listed))
        doubled = sorted(n for n, c in listed.items() if c > 1)
        stuck = sorted(f"{j['name']} {j['state']} ({j['reason']})" for j in jobs if j["state"] not in FINISHED)
        failed = sorted(f"{j['name']} {j['state']} ({j['reason']})" for j in jobs if j["state"] in FINISHED[1:])
        assert (lost, doubled, stuck, failed) == ([], [], [], []), (lost, doubled, stuck, failed)
        assert {j["name"]: j["id"] for j in jobs} == self.accepted  # the id each client was answered
        ran = Counter(self.ran.read_text().split())
        assert ran == Counter(f"{n}-{i}" for n, i in self.accepted.items()), \
            ({k: c for k, c in ran.items() if c > 1}, [f"{n}-{i}" for n, i in self.accepted.items()
                                                       if f"{n}-{i}" not in ran])


def gone(pid: int) -> bool:
    """The process has ended (also a zombie not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] in "ZX"


def test_kill_9_of_a_worker_while_clients_submit(srv: Server, tmp_path: Path) -> None:
    _, _, before = pids(srv)
    with Storm(srv, "wa", tmp_path / "marks" / "ran") as storm:
        victim = kill_amid_a_submit(srv, before)
    storm.check()
    wait_for(lambda: pids(srv)[2].get(victim) not in (None, before[victim]), 30, f"worker {victim} to be started again")
    assert pids(srv)[2][1 - victim] == before[1 - victim]  # the other worker served on


def restart_core(s: Server, worker: int | None = None) -> None:
    """kill -9 of the core (and first of worker ``worker``); its workers end with it; ``fairpod up`` again."""
    core, _, workers = pids(s)
    if worker is not None:
        os.kill(workers[worker], signal.SIGKILL)
    s.kill(signal.SIGKILL)
    assert gone(core)
    wait_for(lambda: all(gone(p) for p in workers.values()), 20, "the workers to end with the core")
    s.start()
    assert s.proc is not None
    wait_for(lambda: pids(s)[0] == s.proc.pid and len(pids(s)[2]) == 2, 30, "the new core's two workers")


def test_kill_9_of_the_core_while_clients_submit(srv: Server, tmp_path: Path) -> None:
    with Storm(srv, "wb", tmp_path / "marks" / "ran") as storm:
        restart_core(srv)
    storm.check()


def test_kill_9_of_a_worker_and_the_core_while_clients_submit(srv: Server, tmp_path: Path) -> None:
    with Storm(srv, "wc", tmp_path / "marks" / "ran") as storm:
        restart_core(srv, worker=1)
    storm.check()


# -- in-process: a worker's app over the same database as a core built for API workers (tests/server/inproc_api.py) ----

@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Api, TestClient]]:
    a = Api(tmp_path, api_workers=True)
    app = build_worker(a.home, a.url, Traits.of(a.rt.executor), "http://127.0.0.1:9")  # (no core listens there)
    with TestClient(app, base_url="http://127.0.0.1:9") as c:
        yield a, c
    a.close()


def test_the_core_takes_in_at_its_turn_what_a_worker_committed(pair: tuple[Api, TestClient]) -> None:
    a, c = pair
    auth = {"Authorization": f"Bearer {a.token}"}
    r = c.post("/api/v1/jobs", json=job("w-in"), headers=auth)
    assert r.status_code == 201 and r.json()["state"] == "Pending"
    jid = r.json()["id"]
    assert not a.cp.snap.pending  # committed, not in the core's memory yet: the core writes no state of it
    a.turn()
    assert a.api("GET", f"/jobs/{jid}").json()["state"] == "Running"
    # the core's own submit meanwhile is not taken in twice; a name taken answers as the core does
    own = a.api("POST", "/jobs", json=job("w-own"))
    assert own.status_code == 201
    again = c.post("/api/v1/jobs", json=job("w-own"), headers=auth)
    assert (again.status_code, again.json()) == (409, a.api("POST", "/jobs", json=job("w-own")).json())
    a.turn()
    assert a.api("GET", f"/jobs/{own.json()['id']}").json()["state"] == "Running"


def test_a_worker_forwards_what_it_does_not_serve(pair: tuple[Api, TestClient]) -> None:
    """Without a core on the other end, a cancel is a 502 that says so (not the worker's own answer)."""
    a, c = pair
    r = c.post("/api/v1/jobs/1/cancel", headers={"Authorization": f"Bearer {a.token}"})
    assert r.status_code == 502 and r.json()["title"] == "core unavailable" and WORKER in r.headers


def test_only_the_cores_workers_wake_it(pair: tuple[Api, TestClient]) -> None:
    """A wake is a datagram on the socket pair the core made for its workers (server.runtime.wakes): a worker's
    poke wakes the loop; nothing on the core's port does (no route), and a process not given the pair's end has
    no address to send to (an unnamed Unix socket pair)."""
    from fairpod.server.core.worker import Poke
    from fairpod.server.runtime.wakes import Wakes

    a, _ = pair
    assert a.request("POST", "/internal/wake", "").status_code in (401, 404, 405)
    wakes = Wakes()
    assert wakes.core_end.getsockname() == "" and wakes.worker_end.getsockname() == ""  # unnamed: no address
    try:
        a.cp.wake.clear()
        wakes.listen(a.cp.wake.set)
        Poke(wakes.worker_end).set()
        assert a.cp.wake.wait(30), "the poke did not wake the core"
        wait_for(lambda: wakes.taken == 1, 30, "the datagram to be read")
    finally:
        wakes.close()


# the core process (fairpod.server.runtime.workers.Workers starting one worker), ended at once, as kill -9 would, while
# its worker still imports: before the worker's PR_SET_PDEATHSIG
CORE = """
import os, socket, sys, time
from pathlib import Path
from fairpod.executors.base import Traits
from fairpod.server.runtime.workers import PIDS_FILE, Workers
home = Path(sys.argv[1])
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
Workers(home, 1, [s], 9, sys.argv[2], Traits("local", False, False)).start()
deadline = time.monotonic() + 30
while time.monotonic() < deadline and not (home / PIDS_FILE).exists():
    time.sleep(0.01)
print(s.getsockname()[1], flush=True)
os._exit(0)
"""
# a subreaper above the core (as systemd --user, or a container's init, is): the orphaned worker becomes its child,
# not init's; it says whether the worker ended or went on to serve the public socket
REAPER = """
import ctypes, os, signal, subprocess, sys, time
import httpx
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
core = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]], stdout=subprocess.PIPE, text=True)
port = int(core.stdout.readline())  # (the worker holds the pipe too: no read to its end)
core.wait()
home = sys.argv[2]
pid = int(open(os.path.join(home, "api-workers.pid")).read().splitlines()[1].split()[1])
deadline, said = time.monotonic() + 60, "still there"
while time.monotonic() < deadline:
    if os.waitpid(pid, os.WNOHANG)[0] == pid:
        said = "ended"
        break
    try:
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
        said = "serving"
        break
    except httpx.HTTPError:
        time.sleep(0.05)
if said != "ended":
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(said)
"""


def test_a_worker_whose_core_ended_before_it_started_ends_under_a_subreaper(tmp_path: Path) -> None:
    """The core killed while a worker it just started still imports (kill -9 of a worker, then of the core): the
    worker, orphaned before it asked for PR_SET_PDEATHSIG, must not serve the public socket on its own (a new
    ``fairpod up`` could not bind it), also when the orphan's new parent is a subreaper and not PID 1."""
    home = tmp_path / "home"
    url = f"sqlite:///{home / 'fairpod.db'}"
    initialize(home, url, str(SEED_SPEC), 0)[0].close()
    r = subprocess.run([sys.executable, "-c", REAPER, CORE, str(home), url], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ended", (r.stdout, r.stderr[-2000:])


# a stand-in for an API worker still importing: it holds the public port (a real one ends by itself, once it
# notices its core is gone, before a test could look)
HOLDER = """
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
print("holding", flush=True)
time.sleep(120)
"""


def test_up_stops_the_workers_a_killed_core_left_on_its_port(tmp_path: Path) -> None:
    """A core killed -9 just after it started a worker (a worker killed, then the core): the new worker, still
    importing, holds the public port until it notices, longer on a loaded machine, and is not yet in
    api-workers.pid. ``fairpod up`` at once stops it (its command line names the dead core) and binds the port,
    rather than refusing it as taken."""
    from ...ports import free_port

    dead = subprocess.Popen(["true"])
    dead.wait()
    held = free_port()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(held), "-m", "fairpod.server.runtime.workers",
                               "--core-pid", str(dead.pid)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    # another user's process whose command line names the dead core too: not this server's to stop
    other = subprocess.Popen(["/bin/sh", "-c", "sleep 120; :", "fairpod.server.runtime.workers", "--core-pid",
                              str(dead.pid)],
                             user=65534 if os.getuid() == 0 else None, start_new_session=True)
    s = Server(tmp_path, SEED_SPEC)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        s.home.mkdir(parents=True)
        (s.home / "api-workers.pid").write_text(f"core {dead.pid} {free_port()}\n")
        s.port, s.url, s.extra = held, f"http://127.0.0.1:{held}", ["--api-workers", "1"]
        s.start()
        assert s.port == held, (tmp_path / "server.out").read_text()[-3000:]  # not another port drawn after a refusal
        assert holder.wait(30) == -signal.SIGTERM
        said = (tmp_path / "server.out").read_text()
        assert f"stopped API workers a killed server left: pid {holder.pid}\n" in said, said
        if os.getuid() == 0:  # (a user without root runs both as itself)
            assert other.poll() is None
    finally:
        holder.kill()
        holder.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(other.pid, signal.SIGKILL)  # the shell and its sleep (its own session)
        other.wait()
        s.kill(signal.SIGTERM)
        s.kill_replicas()


@pytest.mark.parametrize(("flags", "says", "gc"), [
    (["--api-workers", "-1"], "fairpod: error: --api-workers must be from 0 to 64, not -1", None),
    ([], "fairpod: error: FAIRPOD_GC_THRESHOLDS must be three whole numbers from 1 to 10000000 separated by "
         "commas (as gc.set_threshold takes them), not '1,2'", "1,2"),
])
def test_api_workers_refused_in_one_line(tmp_path: Path, flags: list[str], says: str, gc: str | None) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "FAIRPOD_HOME": str(home), "FAIRPOD_CONFIG": str(tmp_path / "c.json")}
    env.pop("FAIRPOD_GC_THRESHOLDS", None)
    if gc is not None:
        env["FAIRPOD_GC_THRESHOLDS"] = gc
    env.pop("FAIRPOD_DB_URL", None)
    r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "up", "--port", "1", *flags], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith(says) and r.stderr.count("\n") == 1, r.stderr
    assert not home.exists()  # nothing written


def test_a_workers_submits_wait_their_turn_among_the_workers_and_count_it_as_their_write_wait(
        pair: tuple[Api, TestClient]) -> None:
    """On SQLite a worker's group of submits first takes its turn among the home's writers (``store.writers``: an
    flock on ``submit-writers.lock`` in the home), held here as another worker would hold it: the submit waits,
    then is answered once the turn is let go, and that wait counts in the worker's write-lock wait."""
    import fcntl

    from fairpod.store.waits import WRITE_WAITS

    a, c = pair
    w = c.app.app.app.state.cp  # type: ignore[attr-defined] - the WorkerCore (Signed -> LeanSubmit -> FastAPI)
    assert w.store.turn is not None
    before = WRITE_WAITS.figures()["sum"]
    other = os.open(a.home / "submit-writers.lock", os.O_RDWR)  # another worker's hold of the turn
    out: list[httpx.Response] = []
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        t = threading.Thread(target=lambda: out.append(c.post("/api/v1/jobs", json=job("turn-1"),
                                                              headers={"Authorization": f"Bearer {a.token}"})))
        t.start()
        wait_for(lambda: w.writer._thread is not None and not w.writer._queue and w.store.turn._depth == 1, 30,
                 "the writer to wait for its turn")
        assert not out  # not answered while the other worker holds the turn
        time.sleep(0.2)  # the least wait the figures must show (a bound the test sets, not a timing of fairpod)
        fcntl.flock(other, fcntl.LOCK_UN)
        t.join(30)
    finally:
        os.close(other)
    assert [r.status_code for r in out] == [201], out[0].text if out else "no answer"
    assert WRITE_WAITS.figures()["sum"] - before >= 0.2


def test_the_cores_writes_take_their_turn_among_the_homes_writers(pair: tuple[Api, TestClient]) -> None:
    """The core's transactions wait their turn at the same lock as the workers' (``Store.turn``), asleep in the
    kernel until it is let go, not in SQLite's busy handler: polling against two workers that handed SQLite's
    lock to each other, the core's turn waited up to ~0.5 s to commit (benchmarks/README.md, "The core's turn
    at the write lock"). Held here as a worker would hold it, a submit to the core is not answered until the
    turn is let go, then it is."""
    import fcntl

    a, _ = pair
    assert a.store.turn is not None
    other = os.open(a.home / "submit-writers.lock", os.O_RDWR)  # a worker's hold of the turn
    out: list[httpx.Response] = []
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        t = threading.Thread(target=lambda: out.append(a.api("POST", "/jobs", json=job("core-turn"))))
        t.start()
        wait_for(lambda: a.store.turn._depth == 1, 30, "the core's write to wait for its turn")
        t.join(0.2)
        assert not out and t.is_alive()  # not answered while the worker holds the turn
        fcntl.flock(other, fcntl.LOCK_UN)
        t.join(30)
    finally:
        os.close(other)
    assert [r.status_code for r in out] == [201], out[0].text if out else "no answer"


def test_concurrent_submits_in_a_worker_are_one_transaction_each_answered_as_if_sequential(
        pair: tuple[Api, TestClient]) -> None:
    """Submits that arrive while the worker's writer waits for SQLite's write lock (held here by another
    connection, as the core's turn or another worker holds it) are written in one transaction: fewer BEGIN
    IMMEDIATEs on the worker's store than submits. Each request gets its own answer: a job the cluster can never
    hold is refused alone, a repeated idempotency key answers the first job, a name taken twice in one group
    fails only the second, every other job is there once. The core is woken once a group, not once a submit."""
    import sqlite3

    from sqlalchemy import event

    from fairpod.server.core.worker import Poke
    from fairpod.server.runtime.wakes import Wakes

    a, c = pair
    w = c.app.app.app.state.cp  # type: ignore[attr-defined] - the WorkerCore (Signed -> LeanSubmit -> FastAPI)
    writes: list[str] = []
    event.listen(w.store.engine, "before_cursor_execute",
                 lambda conn, cur, sql, *_: writes.append(sql) if sql == "BEGIN IMMEDIATE" else None)
    auth = {"Authorization": f"Bearer {a.token}"}

    def group(asks: list[tuple[dict[str, Any], dict[str, str]]]) -> list[httpx.Response]:
        """The asks sent at once: the first takes the writer and waits on SQLite's lock; the rest queue."""
        out: list[httpx.Response | None] = [None] * len(asks)

        def send(i: int) -> None:
            body, headers = asks[i]
            out[i] = c.post("/api/v1/jobs", json=body, headers={**auth, **headers})

        lock = sqlite3.connect(a.home / "fairpod.db", isolation_level=None, timeout=30)
        lock.execute("BEGIN IMMEDIATE")  # SQLite's one write lock, held by another connection
        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(asks))]
        try:
            threads[0].start()
            wait_for(lambda: w._writer.locked(), 30, "the first submit to take the worker's writer")
            for th in threads[1:]:
                th.start()
            wait_for(lambda: len(w.writer) == len(asks) - 1, 30, "the other submits to queue behind it")
        finally:
            lock.execute("COMMIT")
            lock.close()
        for th in threads:
            th.join(timeout=60)
        assert not any(th.is_alive() for th in threads)
        return [r for r in out if r is not None]

    key = {"Idempotency-Key": "gc-key"}
    asks = [(job(f"gc-{i}"), {}) for i in range(12)]
    asks += [(job("gc-key"), key), (job("gc-key"), key), (job("gc-never", nodes=40), {})]
    del writes[:]
    wakes = Wakes()  # the core's end, not read here: the datagrams queue
    w.wake = Poke(wakes.worker_end)
    try:
        answers = group(asks)
    finally:
        wakes.close()
    assert len(answers) == len(asks) and len(writes) == 2  # the first alone, then the 14 queued behind it
    assert w.wake.sent == 2  # one wake of the core a group, sent by its writer after the commit
    w.wake = None
    assert [r.status_code for r in answers[:12]] == [201] * 12
    keyed = sorted(answers[12:14], key=lambda r: r.status_code)  # which of the two came first is the kernel's
    assert [(r.status_code, r.headers.get("Idempotent-Replayed")) for r in keyed] == [(200, "true"), (201, None)]
    assert keyed[0].json()["id"] == keyed[1].json()["id"]
    assert answers[14].status_code == 400 and "40 ml.g5.12xlarge nodes" in answers[14].json()["detail"]

    # a name taken twice in one group: the group is written one by one, only the second of the two fails
    asks = [(job("gc-a"), {}), (job("gc-b"), {}), (job("gc-same"), {}), (job("gc-same"), {}), (job("gc-c"), {})]
    answers = group(asks)
    assert [r.status_code for r in answers[:2] + answers[4:]] == [201, 201, 201], [r.text for r in answers]
    clash = sorted(answers[2:4], key=lambda r: r.status_code)
    assert [r.status_code for r in clash] == [201, 409]
    assert clash[1].json() == a.api("POST", "/jobs", json=job("gc-same")).json()  # as the core answers it
    names = [j["name"] for j in a.api("GET", "/jobs?team=john&limit=0").json()["jobs"]]
    want = [f"gc-{i}" for i in range(12)] + ["gc-key", "gc-a", "gc-b", "gc-same", "gc-c"]
    assert sorted(n for n in names if n.startswith("gc-")) == sorted(want)  # each once, the refused one absent


def test_a_workers_waits_for_the_write_lock_reach_the_cores_metrics(pair: tuple[Api, TestClient]) -> None:
    """A worker's submit that waits on SQLite's write lock (held by another connection) is timed from its BEGIN
    IMMEDIATE; the wake it sends carries the figures, and the core's /metrics shows them under the worker's
    pid. A wake without the worker token is refused, a body of another shape is not kept."""
    import json
    import re
    import sqlite3

    from sqlalchemy import event

    from fairpod.server.core.worker import Poke
    from fairpod.server.runtime.wakes import Wakes

    a, c = pair
    w = c.app.app.app.state.cp  # type: ignore[attr-defined] - the WorkerCore (Signed -> LeanSubmit -> FastAPI)
    began = threading.Event()
    event.listen(w.store.engine, "before_cursor_execute",
                 lambda conn, cur, sql, *_: began.set() if sql == "BEGIN IMMEDIATE" else None)
    before = json.loads(Poke.body())["write_waits"]
    lock = sqlite3.connect(a.home / "fairpod.db", isolation_level=None, timeout=30)
    lock.execute("BEGIN IMMEDIATE")
    out: list[httpx.Response] = []
    th = threading.Thread(target=lambda: out.append(
        c.post("/api/v1/jobs", json=job("ww-1"), headers={"Authorization": f"Bearer {a.token}"})))
    th.start()
    try:
        assert began.wait(30)
        th.join(timeout=0.05)  # the lock held 50 ms more while the submit waits on it (it cannot end meanwhile)
        assert th.is_alive()
    finally:
        lock.execute("COMMIT")
        lock.close()
    th.join(timeout=60)
    assert out and out[0].status_code == 201, out
    body = json.loads(Poke.body())
    waits = body["write_waits"]
    assert sum(waits["counts"]) > sum(before["counts"]) and waits["sum"] - before["sum"] >= 0.05

    wakes = Wakes()  # the core's end of its workers' wakes, as `fairpod up --api-workers` listens to it
    try:
        wakes.listen(a.cp.wake.set)
        odd = json.dumps({"pid": 1, "write_waits": {"counts": [1], "sum": -1}})
        for sent in (Poke.body(), odd.encode(), b"{not json", b"x" * 10_000):
            wakes.worker_end.send(sent)
        wait_for(lambda: wakes.taken == 4, 30, "the four datagrams to be read")
    finally:
        wakes.close()
    text = a.request("GET", "/metrics").text
    got = re.search(rf'fairpod_store_write_wait_seconds_count{{process="worker-{body["pid"]}"}} (\S+)', text)
    assert got is not None and float(got.group(1)) >= sum(waits["counts"])
    assert 'process="worker-1"' not in text and 'process="core"' in text


def test_a_workers_submit_reads_no_row_back_for_its_answer(pair: tuple[Api, TestClient]) -> None:
    """The 201 of a worker's submit is the job it wrote: its live attempt (none yet) is the record's own
    ``run_state``, not a second read of the job's row after the commit; the answer is the view of the job as
    get-job through the same worker shows it."""
    from sqlalchemy import event

    a, c = pair
    w = c.app.app.app.state.cp  # type: ignore[attr-defined] - the WorkerCore (Signed -> LeanSubmit -> FastAPI)
    auth = {"Authorization": f"Bearer {a.token}"}
    said: list[str] = []
    event.listen(w.store.engine, "before_cursor_execute", lambda conn, cur, sql, *_: said.append(sql))
    r = c.post("/api/v1/jobs", json=job("rb-1"), headers=auth)
    assert r.status_code == 201, r.text
    inserted = next(i for i, sql in enumerate(said) if sql.startswith("INSERT INTO jobs"))
    assert not [sql for sql in said[inserted:] if sql.startswith("SELECT") and "FROM jobs" in sql], said[inserted:]
    got = c.get(f"/api/v1/jobs/{r.json()['id']}", headers=auth).json()
    assert r.json() == {k: v for k, v in got.items() if k != "events"}  # get-job adds the job's events


def test_a_poke_is_never_waited_for() -> None:
    """A worker's poke is sent from its committing thread and never waits: while the core reads none (a turn
    holds it, it restarts), the pokes fill the pair's queue and the rest are dropped at once (a wake already
    queued will wake the loop); once the core reads again, the next poke arrives. A core that is gone refuses
    the datagram: the poke is dropped, the submit goes on."""
    from fairpod.server.core.worker import Poke
    from fairpod.server.runtime.wakes import Wakes

    wakes = Wakes()
    poke = Poke(wakes.worker_end)
    try:
        for _ in range(5_000):  # far more than the queue holds: none of them blocks
            poke.set()
        assert 0 < poke.sent < 5_000
        woke = threading.Event()
        wakes.listen(woke.set)
        assert woke.wait(30)
        wait_for(lambda: wakes.taken == poke.sent, 30, "the queued pokes to be read")
        woke.clear()
        poke.set()
        assert woke.wait(30) and poke.sent == wakes.taken
    finally:
        wakes.close()
    poke.set()  # the core's end closed
    assert poke.sent == wakes.taken


def test_a_workers_submit_is_one_transaction_checked_against_the_spec_stored_when_it_commits(
        pair: tuple[Api, TestClient]) -> None:
    """A worker's submit takes one transaction (no read of the spec's version in one of its own before it), and
    is checked against the spec stored when it commits: a job that could never fit is refused, the spec grown by
    the core, the same job through the worker at once (within the second its view of the spec may be old) is
    accepted; the spec shrunk again, refused again."""
    from sqlalchemy import event

    a, c = pair
    w = c.app.app.app.state.cp  # type: ignore[attr-defined] - the WorkerCore (Signed -> LeanSubmit -> FastAPI)
    auth = {"Authorization": f"Bearer {a.token}"}
    begins: list[str] = []
    event.listen(w.store.engine, "before_cursor_execute",
                 lambda conn, cur, sql, *_: begins.append(sql) if sql.startswith("BEGIN") else None)

    def resize(count: int) -> None:
        spec = a.api("GET", "/spec").json()
        spec = spec.get("spec", spec)
        spec["cluster"]["instance_groups"][0]["count"] = count
        assert a.api("PUT", "/spec", json=spec).status_code == 200

    assert c.post("/api/v1/jobs", json=job("sc-0"), headers=auth).status_code == 201  # (its token now known)
    del begins[:]
    for i in range(1, 4):
        assert c.post("/api/v1/jobs", json=job(f"sc-{i}"), headers=auth).status_code == 201
    assert [b for b in begins if b.startswith("BEGIN")] == ["BEGIN IMMEDIATE"] * 3, begins
    assert c.post("/api/v1/jobs", json=job("sc-6", nodes=6), headers=auth).status_code == 400
    resize(8)
    r = c.post("/api/v1/jobs", json=job("sc-6", nodes=6), headers=auth)
    assert r.status_code == 201, r.text
    resize(4)
    r = c.post("/api/v1/jobs", json=job("sc-6b", nodes=6), headers=auth)
    assert r.status_code == 400 and "6 ml.g5.12xlarge nodes" in r.json()["detail"], r.text
