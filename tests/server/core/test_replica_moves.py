"""A replica whose node fails is restarted on another node, the job's other replicas kept running (issue 49): the
in-process control plane with the local executor and real processes (tests/server/inproc_api.py), one per module. The
node fault goes the way of a real one: injected into the node's readings, seen by the health agent's round
(``HealthManager.agent_round``), made a fault by the core's ``node_fault``. With DDP and recovery from peers on a
live server: tests/training/test_peer_recovery.py."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ..inproc_api import Api

SLEEP = ["python3", "-c", "import time; time.sleep(600)"]


@pytest.fixture(scope="module")
def la(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    a = Api(tmp_path_factory.mktemp("moves"), executor="local")
    yield a
    a.close()


def child(a: Api, job: dict, rank: int) -> int | None:
    """The host PID of the replica's process (its supervisor's child), read from its run directory (None: not
    started yet)."""
    f = a.home / "runs" / f"{job['name']}-{job['id']}" / str(job["restarts"]) / str(rank) / "child.pid"
    try:
        return int(f.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def turns(a: Api, pred: Callable[[], Any], what: str) -> Any:
    return a.turns_while_busy(pred, what)


def events(a: Api, name: str, kind: str) -> list[dict]:
    return [e for e in a.api("GET", f"/jobs/{name}/events").json()["events"] if e["kind"] == kind]


def started(a: Api, name: str, n: int) -> dict:
    """Turns until all ``n`` replicas of job ``name`` have their process; the job."""
    def up() -> dict | None:
        j = a.job(name)
        return j if j["state"] == "Running" and all(child(a, j, r) for r in range(n)) else None
    return turns(a, up, f"job {name}'s {n} replicas to start")


def end(a: Api, *names: str) -> None:
    for name in names:
        a.api("POST", f"/jobs/{name}/cancel")
    turns(a, lambda: all(a.job(n)["state"] == "Cancelled" for n in names), "the jobs to end")


def node_fault(a: Api, node: str) -> None:
    """An Xid fault injected into ``node``'s readings, then the health agent's round that finds it."""
    assert a.api("POST", f"/nodes/{node}/inject-fault", json={"kind": "xid"}).status_code == 200
    assert a.cp.health is not None
    a.cp.health.agent_round()


def back(a: Api, node: str) -> None:
    """The node healthy again for the next test (its fault label cleared, as a reboot does)."""
    nd = a.cp.queries.get_node(node)
    a.cp.set_labels(node, {**nd.labels, "injected_faults": []})
    a.cp.node_recovered(node)


def test_a_replica_whose_node_fails_moves_to_the_free_node_and_the_others_keep_their_processes(la: Api) -> None:
    a = la
    a.submit(name="mv", team="john", nodes=3, restarts_in_place=1, auto_resume=True, max_retry=1,
             termination_grace_seconds=1, command=SLEEP)
    job = started(a, "mv", 3)
    placed = job["placement"]
    spare = next(n["name"] for n in a.api("GET", "/nodes").json()["nodes"] if n["name"] not in placed)
    before = {r: child(a, job, r) for r in range(3)}
    node_fault(a, placed[1])
    moved = turns(a, lambda: (j := a.job("mv"))["placement"][1] == spare and events(a, "mv", "ReplicaRestarted")
                  and j, "replica 1 to start on the spare node")
    assert moved["state"] == "Running" and moved["restarts"] == 0, moved  # the same attempt: no full restart
    assert moved["placement"] == [placed[0], spare, placed[2]]
    ev = events(a, "mv", "ReplicaMoved")
    assert len(ev) == 1 and ev[0]["data"]["source"] == placed[1] and ev[0]["data"]["target"] == spare, ev
    assert ev[0]["data"]["reason"].startswith(f"node {placed[1]} fault: NvidiaErrorReboot"), ev
    assert f"from node {placed[1]} to node {spare}" in ev[0]["message"]
    after = turns(a, lambda: (c := {r: child(a, moved, r) for r in range(3)})[1] not in (None, before[1]) and c,
                  "replica 1's new process")
    assert after[0] == before[0] and after[2] == before[2]  # the healthy replicas keep their processes
    assert all(alive(after[r]) for r in (0, 2)) and not alive(before[1])  # type: ignore[arg-type]
    launch = a.home / "runs" / f"mv-{job['id']}" / "0" / "1" / "launch.json"
    assert f'"node": "{spare}"' in launch.read_text().replace('":"', '": "')  # started on the new node
    assert not events(a, "mv", "JobRestarting")
    assert a.cp.jobs_on(placed[1]) == []  # nothing of it left on the failed node: it may be rebooted
    end(a, "mv")
    back(a, placed[1])


def test_a_replica_that_crashes_on_a_cordoned_node_restarts_on_another(la: Api) -> None:
    a = la
    a.submit(name="cr", team="john", nodes=3, restarts_in_place=1, termination_grace_seconds=1, command=SLEEP)
    job = started(a, "cr", 3)
    placed = job["placement"]
    before = {r: child(a, job, r) for r in range(3)}
    assert a.api("POST", f"/nodes/{placed[2]}/cordon").status_code == 200  # no new work there
    os.kill(before[2], signal.SIGKILL)  # type: ignore[arg-type]
    moved = turns(a, lambda: (j := a.job("cr"))["placement"][2] not in placed and events(a, "cr", "ReplicaRestarted")
                  and j, "replica 2 to restart on another node")
    assert moved["restarts"] == 0 and moved["placement"][:2] == placed[:2]
    (ev,) = events(a, "cr", "ReplicaMoved")
    assert ev["data"]["reason"] == f"node {placed[2]} is cordoned" and ev["data"]["target"] == moved["placement"][2]
    restarting = events(a, "cr", "ReplicaRestarting")
    assert [e["data"]["restart"] for e in restarting] == ["in-place"], restarting
    assert f"restarting it on node {moved['placement'][2]} (node {placed[2]} is cordoned)" in restarting[0]["message"]
    assert [child(a, moved, r) for r in (0, 1)] == [before[0], before[1]]
    end(a, "cr")
    assert a.api("POST", f"/nodes/{placed[2]}/uncordon").status_code == 200


def test_no_free_node_restarts_the_job_whole_and_says_why(la: Api) -> None:
    a = la
    a.submit(name="full", team="john", nodes=3, accelerators=4, restarts_in_place=1, auto_resume=True,
             max_retry=1, termination_grace_seconds=1, command=SLEEP)
    job = started(a, "full", 3)
    a.submit(name="filler", team="smith", nodes=1, accelerators=4, command=SLEEP)  # the fourth node, whole
    started(a, "filler", 1)
    lost = job["placement"][0]
    node_fault(a, lost)
    turns(a, lambda: a.job("full")["restarts"] == 1, "the full restart")
    (fall,) = [e for e in events(a, "full", "ReplicaRestarting") if e["data"]["restart"] == "full"]
    assert fall["data"]["fallback"] == "full" and fall["data"]["why"].startswith(
        "no other schedulable ml.g5.12xlarge node has room for the replica (4 accelerators"), fall
    assert f"replica 0 lost with its node (node {lost} fault: NvidiaErrorReboot" in fall["message"]
    assert not events(a, "full", "ReplicaMoved")
    (whole,) = events(a, "full", "JobRestarting")
    assert whole["message"].startswith(f"job full: node {lost} fault: NvidiaErrorReboot"), whole
    end(a, "full", "filler")
    back(a, lost)
