"""Services end to end: a real server, real HTTP replicas, the CLI, and a client sending requests through the
service's address while a reclaim shrinks it.

Four 1-accelerator nodes; john and smith have two each. smith's service (1..4 replicas) starts within smith's
quota, grows into john's two idle nodes (borrowed), and is shrunk back one replica at a time, each drained, when
john reclaims them; a client loop through the address sees no failed request throughout.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ... import httpclient
from ..conftest import Server, running, wait_for

SPEC = """
cluster:
  name: four
  instance_groups:
    - {name: g, instance_type: unit1, count: 4}
instance_types:
  - {name: unit1, accelerators: 1, vcpu: 2, memory_gib: 4}
teams:
  - {name: john, sharing: {strategy: LendAndBorrow, borrow_limit: 100}, quota: [{instance_type: unit1, count: 2}]}
  - {name: smith, sharing: {strategy: LendAndBorrow, borrow_limit: 100}, quota: [{instance_type: unit1, count: 2}]}
"""

# an HTTP replica: answers its rank on /, 200 on /healthz once warm; notes its start and its SIGTERM in a log
REPLICA = '''
import http.server, os, signal, sys, time
rank, log = os.environ["RANK"], sys.argv[1]
def note(word):
    with open(log, "a") as f:
        f.write(f"{word} {rank} {os.environ['PORT']} {time.time()}\\n")
def term(*_):
    note("term")
    os._exit(0)
signal.signal(signal.SIGTERM, term)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(float(os.environ.get("WORK_SECONDS", "0")))  # a request takes a while: killed, it fails
        body = rank.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H)
note("start")
srv.serve_forever()
'''


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, SPEC)


def plain(server: Server, name: str, team: str) -> None:
    server.cli("start-job", "--name", name, "--team", team, "--grace-seconds", "1", "--", "sleep", "300")


def lines(log: Path, word: str) -> list[list[str]]:
    return [ln.split() for ln in log.read_text().splitlines() if ln.startswith(word)] if log.exists() else []


class Client:
    """Requests through the service's address in loops (``n`` at a time), each as soon as the last was answered,
    until stopped."""

    def __init__(self, address: str, n: int = 4) -> None:
        self.address = address
        self.answers: Counter[str] = Counter()
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        with httpx.Client(timeout=10) as c:
            while not self.stop.is_set():
                try:
                    r = c.get(self.address + "/")
                    if r.status_code == 200:
                        self.answers[r.text] += 1
                    else:
                        self.failures.append(f"{r.status_code} {r.text}")
                except httpx.HTTPError as e:
                    self.failures.append(repr(e))

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=20)


def test_a_service_grows_into_borrowed_capacity_and_a_reclaim_drains_it_with_no_failed_request(
        server: Server, tmp_path: Path):
    log = tmp_path / "svc.log"
    script = tmp_path / "serve.py"
    script.write_text(REPLICA)
    out = server.cli("start-service", "--name", "chat", "--team", "smith", "--min-replicas", "1",
                     "--max-replicas", "4", "--readiness-path", "/healthz", "--drain-seconds", "1",
                     "--grace-seconds", "2", "--env", "WORK_SECONDS=0.2", "--", "python", str(script),
                     str(log)).stdout
    assert "service chat" in out and "get-service chat" in out
    svc = wait_for(lambda: (s := server.api("GET", "/services/chat").json())["ready_replicas"] == 4 and s,
                   60, "4 ready replicas of chat")
    assert svc["address"].startswith("http://127.0.0.1:") and (svc["min_replicas"], svc["max_replicas"]) == (1, 4)
    assert [e["rank"] for e in svc["endpoints"]] == [0, 1, 2, 3]
    # two of its replicas run on john's idle nodes: borrowed (the reclaim below says "john reclaims")
    text = server.cli("get-service", "chat").stdout
    assert svc["address"] in text and "4 ready" in text
    assert "chat" in server.cli("list-services").stdout and "get-service chat" in server.cli("get-job", "chat").stdout

    client = Client(svc["address"])
    try:
        wait_for(lambda: len(client.answers) == 4, 30, "answers from all 4 replicas")
        plain(server, "john-a", "john")  # john reclaims a node: chat's highest replica drains, then goes
        wait_for(lambda: server.job("john-a")["started_at"], 60, "john-a to start")  # once rank 3 has gone
        plain(server, "john-b", "john")  # and its second: the next one
        wait_for(lambda: server.job("john-b")["started_at"], 60, "john-b to start")
        seen = sum(client.answers.values())
        wait_for(lambda: sum(client.answers.values()) > seen + 20, 30, "more answers after the shrink")
    finally:
        client.close()
    assert client.failures == [], client.failures[:5]
    terms = wait_for(lambda: len(got := lines(log, "term")) >= 2 and got, 10, "2 term lines")
    assert [t[1] for t in terms] == ["3", "2"], log.read_text()  # one at a time, the highest first
    assert float(terms[1][3]) - float(terms[0][3]) >= 1.0  # each after its own drain period
    j = server.job("chat")
    assert j["state"] == "Running" and j["nodes"] == 2 and j["preemptions"] == 0 and j["kind"] == "service"
    svc = server.api("GET", "/services/chat").json()
    assert [e["rank"] for e in svc["endpoints"]] == [0, 1] and svc["address"] == client.address
    shrunk = [e for e in server.api("GET", "/jobs/chat/events").json()["events"] if e["kind"] == "JobShrunk"]
    assert len(shrunk) == 2 and all("john reclaims" in e["message"] for e in shrunk)

    r = server.cli("delete-service", "chat")
    assert "Cancelled" in r.stdout or "cancel" in r.stdout.lower()
    server.wait_state("chat", "Cancelled", timeout=30)
    wait_for(lambda: server.api("GET", "/services/chat").json()["address"] is None, 10, "the address to go")


def test_a_replica_that_exits_starts_again_and_the_others_serve_on(server: Server, tmp_path: Path):
    log = tmp_path / "svc.log"
    script = tmp_path / "serve.py"
    # replica 1 exits 3 on its first start, before it listens (a listening socket passes the TCP readiness check:
    # bound first, it was counted ready in the moment before it exited); started again, it serves
    script.write_text(REPLICA.replace('note("start")\n', '').replace(
        'srv = http.server', 'note("start")\nif rank == "1" and len(open(log).read().split("start 1 ")) == 2:'
        '\n    os._exit(3)\nsrv = http.server'))
    server.cli("start-service", "--name", "web", "--team", "smith", "--min-replicas", "2",
               "--grace-seconds", "1", "--", "python", str(script), str(log))
    svc = wait_for(lambda: (s := server.api("GET", "/services/web").json())["ready_replicas"] == 2 and s,
                   60, "2 ready replicas of web")
    starts = lines(log, "start")
    assert sorted(s[1] for s in starts) == ["0", "1", "1"]  # rank 0 started once, rank 1 twice
    j = server.job("web")
    assert j["state"] == "Running" and j["restarts"] == 0
    ev = [e for e in server.api("GET", "/jobs/web/events").json()["events"] if e["kind"] == "ReplicaRestarting"]
    assert len(ev) == 1 and "replica 1 exited 3" in ev[0]["message"]
    assert httpclient.get(svc["address"] + "/", timeout=10).status_code == 200
    server.cli("delete-service", "web")
    server.wait_state("web", "Cancelled", timeout=30)


def test_service_flags_are_checked_in_one_line(server: Server):
    for flags, msg in ((["--min-replicas", "3", "--max-replicas", "2"], "--max-replicas 2 is less than"),
                       (["--max-replicas", "5"], "--max-replicas 5 is more than the 4 unit1 nodes"),
                       (["--readiness-path", "healthz"], "--readiness-path 'healthz': give a path")):
        r = server.cli("start-service", "--name", "x", "--team", "john", *flags, "--", "true", check=False)
        assert r.returncode != 0 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = server.cli("get-service", "nope", check=False)
    assert r.returncode != 0 and "no job 'nope'" in r.stderr
    plain(server, "batch", "john")
    r = server.cli("get-service", "batch", check=False)
    assert r.returncode != 0 and "is not a service" in r.stderr
