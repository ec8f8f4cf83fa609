"""Services against a real server: the minimum replicas only within quota, a crash loop backs off, and a drain
survives a restart of the control plane.

Two 1-accelerator nodes; john and smith have one each (both lend and borrow).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import Server, running, wait_for
from .test_services_live import REPLICA, lines, plain

SPEC = """
cluster:
  name: two
  instance_groups:
    - {name: g, instance_type: unit1, count: 2}
instance_types:
  - {name: unit1, accelerators: 1, vcpu: 2, memory_gib: 4}
teams:
  - {name: john, sharing: {strategy: LendAndBorrow, borrow_limit: 100}, quota: [{instance_type: unit1, count: 1}]}
  - {name: smith, sharing: {strategy: LendAndBorrow, borrow_limit: 100}, quota: [{instance_type: unit1, count: 1}]}
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, SPEC)


def test_the_minimum_replicas_wait_for_quota_instead_of_borrowing(server: Server, tmp_path: Path):
    script = tmp_path / "serve.py"
    script.write_text(REPLICA)
    # smith's quota is one node, which its job uses; john's node is idle: a second job would borrow it, a
    # service's minimum replica does not
    plain(server, "busy", "smith")
    server.wait_state("busy", "Running")
    server.cli("start-service", "--name", "big", "--team", "smith", "--min-replicas", "1", "--", "python",
               str(script), str(tmp_path / "big.log"))
    j = wait_for(lambda: "quota" in (j := server.job("big"))["reason"] and j, 20, "big's reason")
    assert j["state"] == "Pending" and "never on borrowed capacity" in j["reason"], j["reason"]
    server.cli("delete-service", "big")
    server.wait_state("big", "Cancelled")
    server.cli("cancel-job", "busy")
    server.wait_state("busy", "Cancelled")
    # within its quota it runs, and its replica above the minimum borrows john's idle node
    server.cli("start-service", "--name", "web", "--team", "smith", "--min-replicas", "1", "--max-replicas", "2",
               "--", "python", str(script), str(tmp_path / "web.log"))
    wait_for(lambda: server.api("GET", "/services/web").json()["ready_replicas"] == 2, 30, "2 ready replicas")


def test_a_crash_loop_backs_off_and_starts_over_once_the_replica_stayed_ready(server: Server, tmp_path: Path):
    log = tmp_path / "svc.log"
    script = tmp_path / "serve.py"
    # the replica exits 3 on its first four starts, then serves; it exits before it listens (a replica that
    # listened first could be probed ready, a TCP connect, in the moment before its exit)
    script.write_text(REPLICA.replace('srv = http.server', '(os.path.exists(log) and open(log).read().count("start ") '
                                      '>= 4) or (note("start"), os._exit(3))\nsrv = http.server'))
    server.cli("start-service", "--name", "flaky", "--team", "smith", "--restart-backoff-seconds", "1",
               "--restart-backoff-max-seconds", "3", "--restart-reset-seconds", "1", "--grace-seconds", "1",
               "--", "python", str(script), str(log))
    # after its 3rd exit in a row get-service says when it starts again
    seen = wait_for(lambda: [c for c in server.api("GET", "/services/flaky").json()["restarts"]
                             if c["exits_in_a_row"] >= 3 and c["next_start_at"] > time.time()], 30,
                    "the replica's 3rd exit in a row")
    assert seen[0]["rank"] == 0 and seen[0]["next_start_at"] - time.time() <= 3
    text = server.cli("get-service", "flaky").stdout
    assert "replica 0:" in text and "exits in a row, starts again at" in text, text
    wait_for(lambda: server.api("GET", "/services/flaky").json()["ready_replicas"] == 1, 30, "a ready replica")
    starts = [float(s[3]) for s in lines(log, "start")]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert len(starts) == 5, starts
    assert gaps[0] >= 1 and gaps[1] >= 2 and gaps[2] >= 3 and gaps[3] >= 3, gaps  # 1, 2, 4 capped at 3, 3
    # ready for 1 s in a row: its exits are forgotten
    wait_for(lambda: server.api("GET", "/services/flaky").json()["restarts"] == [], 20, "the backoff to start over")
    ev = [e for e in server.api("GET", "/jobs/flaky/events").json()["events"] if e["kind"] == "ReplicaRestarting"]
    assert [e["data"]["delay"] for e in ev] == [1, 2, 3, 3], [e["message"] for e in ev]


def test_a_drain_goes_on_across_a_restart_of_the_control_plane(server: Server, tmp_path: Path):
    log = tmp_path / "svc.log"
    script = tmp_path / "serve.py"
    script.write_text(REPLICA)
    drain = 18.0  # longer than a restart of the server takes on a loaded machine (6-11 s seen)
    server.cli("start-service", "--name", "chat", "--team", "smith", "--min-replicas", "1", "--max-replicas", "2",
               "--readiness-path", "/healthz", "--drain-seconds", str(drain), "--grace-seconds", "2", "--",
               "python", str(script), str(log))
    wait_for(lambda: server.api("GET", "/services/chat").json()["ready_replicas"] == 2, 30, "2 ready replicas")
    plain(server, "john-a", "john")  # john reclaims its node: replica 1 is drained
    wait_for(lambda: server.api("GET", "/services/chat").json()["draining"] == [1], 20, "replica 1 draining")
    began = time.time()  # its drain began before this: its SIGTERM is due before began + drain
    server.kill(signal.SIGKILL)  # the control plane dies; the replicas run on
    killed = time.time()
    server.start()
    svc = server.api("GET", "/services/chat").json()
    assert svc["draining"] == [1], svc  # still out of the endpoint list after the restart
    wait_for(lambda: [e["rank"] for e in server.api("GET", "/services/chat").json()["endpoints"]] == [0], 10,
             "replica 0 as the only endpoint")
    assert lines(log, "term") == []  # not stopped at once by the restart
    term = wait_for(lambda: lines(log, "term"), drain + 10, "replica 1's SIGTERM")
    at = float(term[0][3])
    # at the end of the drain period that began before the restart: not at once, not a new period after it
    assert term[0][1] == "1" and began + drain - 1.5 <= at < killed + drain, (began, killed, at)
    server.wait_state("john-a", "Running", timeout=30)
    j = server.job("chat")
    assert j["state"] == "Running" and j["nodes"] == 1 and j["preemptions"] == 0


def test_a_service_whose_only_replica_backs_off_survives_a_restart_of_the_control_plane(server: Server,
                                                                                         tmp_path: Path):
    log = tmp_path / "svc.log"
    script = tmp_path / "serve.py"
    script.write_text(REPLICA.replace('note("start")', 'note("start")\nif len(open(log).read().split("start ")) '
                                      '<= 2: os._exit(3)'))  # exits on its first start, then serves
    server.cli("start-service", "--name", "solo", "--team", "smith", "--restart-backoff-seconds", "15",
               "--grace-seconds", "1", "--", "python", str(script), str(log))
    wait_for(lambda: server.api("GET", "/services/solo").json()["restarts"], 30, "the replica's exit")
    server.kill(signal.SIGKILL)  # while no replica of it is live
    server.start()
    assert server.job("solo")["state"] == "Running"
    wait_for(lambda: server.api("GET", "/services/solo").json()["ready_replicas"] == 1, 40, "a ready replica")
    j = server.job("solo")
    assert j["state"] == "Running" and j["restarts"] == 0 and len(lines(log, "start")) == 2
