"""``fairpod up --api-workers 2`` (fairpod.server.runtime.workers): a live server shared by the module, two API
worker processes on the public port and the core on its private one. Submits, list-jobs and get-job are answered
by a worker from the database; the core admits what the workers committed; the core stopped, a worker killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from fairpod.executors.base import Traits
from fairpod.server.runtime.daemon import initialize
from fairpod.server.runtime.wiring import build_worker, wake_token

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


def test_a_worker_killed_is_started_again_and_nothing_is_lost_or_doubled(srv: Server) -> None:
    _, _, before = pids(srv)
    names = [f"w-kill-{i}" for i in range(30)]
    failed: list[str] = []

    def submit_all() -> None:
        for n in names:
            for _ in range(20):  # a connection the killed worker held is retried with the same key
                try:
                    r = fresh(srv, "POST", "/jobs", json=job(n), headers={"Idempotency-Key": n})
                except httpx.HTTPError:
                    continue
                if r.status_code in (200, 201):
                    break
            else:
                failed.append(n)

    th = threading.Thread(target=submit_all)
    th.start()
    os.kill(before[0], signal.SIGKILL)
    th.join(timeout=120)
    assert not th.is_alive() and not failed
    wait_for(lambda: pids(srv)[2].get(0) not in (None, before[0]), 30, "worker 0 to be started again")
    new = pids(srv)[2][0]
    assert Path(f"/proc/{new}").exists()
    listed = [j["name"] for j in srv.api("GET", "/jobs?team=john&limit=0").json()["jobs"] if j["name"] in names]
    assert sorted(listed) == sorted(names)  # each once
    for n in names[-3:]:
        srv.wait_state(n, "Succeeded", timeout=60)


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


def test_only_a_worker_wakes_the_core(pair: tuple[Api, TestClient]) -> None:
    """The core's wake route wants the token only the server's processes can derive from its secret."""
    a, _ = pair
    a.cp.wake.clear()
    for bad in ({}, {"Fairpod-Worker-Token": "guess"}, {"Fairpod-Worker-Token": wake_token(b"another secret")}):
        assert a.request("POST", "/internal/wake", "", headers=bad).status_code == 403
    assert not a.cp.wake.is_set()
    assert a.request("POST", "/internal/wake", "", headers={"Fairpod-Worker-Token": wake_token(a.rt.secret)}
                     ).status_code == 204
    assert a.cp.wake.is_set()


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


@pytest.mark.parametrize(("flags", "says"), [
    (["--api-workers", "2", "--ha", "--db", "postgresql+psycopg://u@127.0.0.1:1/x"],
     "fairpod: error: --api-workers does not go with --ha yet"),
    (["--api-workers", "-1"], "fairpod: error: --api-workers must be from 0 to 64, not -1"),
])
def test_api_workers_refused_in_one_line(tmp_path: Path, flags: list[str], says: str) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "FAIRPOD_HOME": str(home), "FAIRPOD_CONFIG": str(tmp_path / "c.json")}
    env.pop("FAIRPOD_DB_URL", None)
    r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "up", "--port", "1", *flags], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith(says) and r.stderr.count("\n") == 1, r.stderr
    assert not home.exists()  # nothing written


def test_concurrent_submits_in_a_worker_are_one_transaction_each_answered_as_if_sequential(
        pair: tuple[Api, TestClient]) -> None:
    """Submits that arrive while the worker's writer waits for SQLite's write lock (held here by another
    connection, as the core's turn or another worker holds it) are written in one transaction: fewer BEGIN
    IMMEDIATEs on the worker's store than submits. Each request gets its own answer: a job the cluster can never
    hold is refused alone, a repeated idempotency key answers the first job, a name taken twice in one group
    fails only the second, every other job is there once."""
    import sqlite3

    from sqlalchemy import event

    a, c = pair
    w = c.app.app.state.cp  # type: ignore[attr-defined] - the worker's WorkerCore (Signed -> FastAPI)
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
            wait_for(lambda: len(w.submits) == len(asks) - 1, 30, "the other submits to queue behind it")
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
    answers = group(asks)
    assert len(answers) == len(asks) and len(writes) == 2  # the first alone, then the 14 queued behind it
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

    from fairpod.server.access.jobtoken import job_secret
    from fairpod.server.core.worker import Poke

    a, c = pair
    w = c.app.app.state.cp  # type: ignore[attr-defined] - the worker's WorkerCore (Signed -> FastAPI)
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

    token = wake_token(job_secret(a.home, a.store))
    assert a.request("POST", "/internal/wake", "", content=Poke.body(),
                     headers={"Fairpod-Worker-Token": "nope"}).status_code == 403
    odd = json.dumps({"pid": 1, "write_waits": {"counts": [1], "sum": -1}})
    for sent in (Poke.body(), odd.encode(), b"{not json"):
        r = a.request("POST", "/internal/wake", "", content=sent, headers={"Fairpod-Worker-Token": token})
        assert r.status_code == 204
    text = a.request("GET", "/metrics").text
    got = re.search(rf'fairpod_store_write_wait_seconds_count{{process="worker-{body["pid"]}"}} (\S+)', text)
    assert got is not None and float(got.group(1)) >= sum(waits["counts"])
    assert 'process="worker-1"' not in text and 'process="core"' in text
