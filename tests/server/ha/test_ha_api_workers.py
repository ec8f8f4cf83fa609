"""``fairpod up --ha --api-workers 1``: two live nodes on one real PostgreSQL (tests/server/ha_cluster.py), each
with its API worker on its public port. A standby's worker accepts a submit (committed to the database; the leader
takes it in, woken by the commit's NOTIFY) and answers get-job, and passes the rest to its node, which answers as a
standby (503 naming the leader). A job submitted through the standby's worker while the leader is down (killed by
PID) runs once the standby has taken over; a leader that steps down (cut off from the database, then healed)
restarts as a standby with new workers, its old ones gone from the port; ``fairpod down`` stops a worker the
server left. Each job ran once (the marks its command appends)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.store.conftest import pg_url  # noqa: F401  (the fixture: a real PostgreSQL server)

from ... import httpclient
from ..ha_cluster import HaCluster, Node, empty_database, failover, wait_for


@pytest.fixture
def ha(tmp_path: Path, pg_url: str) -> Iterator[HaCluster]:  # noqa: F811
    empty_database(pg_url)
    cluster = HaCluster(tmp_path, pg_url, n=2, lease=3.0, api_workers=1)
    try:
        yield cluster
    finally:
        left = [p for n in cluster.nodes for p in workers(n)]
        cluster.stop_all()
        for pid in left:  # a worker its node did not stop (the test failed): by its PID
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def workers(node: Node) -> list[int]:
    """The PIDs of ``node``'s API workers (``api-workers.pid``; none before they start)."""
    try:
        lines = (node.home / "api-workers.pid").read_text().splitlines()[1:]
    except OSError:
        return []
    return [int(line.split()[1]) for line in lines if len(line.split()) == 2]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def post(ha: HaCluster, node: Node, name: str) -> Any:
    cmd = f'echo ran >> {ha.marks}/{name}; sleep 0.2'
    return httpclient.request("POST", node.url + "/api/v1/jobs", headers={"Authorization": f"Bearer {ha.token}"},
                              json={"name": name, "team": "john", "nodes": 1, "command": ["sh", "-c", cmd]},
                              timeout=30.0)


def succeeded(ha: HaCluster, name: str) -> bool:
    r = ha.request("GET", f"/jobs/{name}")
    return r.status_code == 200 and r.json()["state"] == "Succeeded"


def test_standbys_workers_take_submits_for_the_leader_and_through_a_takeover(ha: HaCluster):
    ha.boot()
    leader = ha.leader()
    standby = ha.nodes[1 - leader.i]
    wait_for(lambda: workers(standby) and workers(leader), 60, "each node's API worker")
    auth = {"Authorization": f"Bearer {ha.token}"}

    # through the standby's public port: its worker commits, the leader runs it
    r = post(ha, standby, "via-standby")
    assert r.status_code == 201, r.text
    assert int(r.headers["fairpod-api-worker"]) in workers(standby)
    got = httpclient.get(standby.url + "/api/v1/jobs/via-standby", headers=auth, timeout=10.0)
    assert got.status_code == 200 and got.json()["id"] == r.json()["id"], got.text
    passed = httpclient.get(standby.url + "/api/v1/spec", headers=auth, timeout=10.0)  # the node's own answer
    assert passed.status_code == 503 and passed.headers.get("x-fairpod-leader") == leader.url, passed.text
    wait_for(lambda: succeeded(ha, "via-standby"), 60, "the standby's submit to run on the leader")

    # the leader killed: its worker ends with it; a submit through the standby meanwhile runs after the takeover
    old = workers(leader)
    ha.kill(leader)
    wait_for(lambda: not any(alive(p) for p in old), 30, "the killed leader's worker to end with it")
    r = post(ha, standby, "while-down")
    assert r.status_code == 201, r.text
    assert ha.leader(besides=leader) is standby
    wait_for(lambda: succeeded(ha, "while-down"), 60, "the submit made while no node led to run")

    # a leader that steps down execs itself: its old workers are stopped, the new image binds the port again
    ha.start(leader.i)
    wait_for(leader.standing_by, 60, "the killed node back as a standby")
    wait_for(lambda: workers(leader), 60, "the node's worker back")
    before = workers(standby)
    failover(ha, "cut")  # the standby, leading now, cut off from the database, then healed
    assert not any(alive(p) for p in before), "a stepped-down node left its old workers"
    wait_for(lambda: workers(standby), 60, "the restarted node's new worker")
    assert set(workers(standby)).isdisjoint(before)
    r = post(ha, standby, "after-restart")
    assert r.status_code == 201, r.text
    wait_for(lambda: succeeded(ha, "after-restart"), 60, "a submit through the restarted node to run")

    for name in ("via-standby", "while-down", "after-restart"):  # each ran once
        assert (ha.marks / name).read_text().splitlines() == ["ran"], name
    # writes by a node that did not lead: a submit's commit by its worker (the job, its event and audit entry, the
    # seq counter, an idempotency key, the caller's token's last use), nothing else: no job changed, nothing deleted
    submits = {("jobs", "INSERT"), ("events", "INSERT"), ("audit", "INSERT"), ("counters", "UPDATE"),
               ("submit_keys", "INSERT"), ("tokens", "UPDATE")}
    assert {(v[3], v[4]) for v in ha.violations()} <= submits, ha.violations()

    # fairpod down on a node whose server was killed -9 with its worker left (as if PR_SET_PDEATHSIG were lost):
    # simulated by a worker-named process listed in api-workers.pid; down stops it by its PID. In a home of its
    # own: the standby's live server rewrites its own api-workers.pid as its workers come and go
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                               "fairpod.server.runtime.workers"], start_new_session=True)
    try:  # once it runs its own command line (right after Popen it may still be this process's fork)
        wait_for(lambda: b"fairpod.server.runtime.workers" in Path(f"/proc/{orphan.pid}/cmdline").read_bytes(),
                 30, "the stand-in worker to run")
        home = standby.home.parent / "killed-node-home"
        home.mkdir()
        (home / "api-workers.pid").write_text(f"core 1 1\n0 {orphan.pid}\n")
        from fairpod.server.runtime.workers import stop_leftovers

        assert stop_leftovers(home) == [orphan.pid]
        assert orphan.wait(10) == -signal.SIGTERM
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
