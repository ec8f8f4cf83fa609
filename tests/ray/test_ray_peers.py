"""Recovery from peers (issue 49) on the Ray executor: the local executor's test (tests/training/test_peer_recovery.py,
whose job and checks it shares: tests/training/peerjob.py) on the session Ray cluster, one server for both tests.

A 3-replica job of examples/ddp/peer_ddp.py (``--peer-recovery``, gloo) runs on three Ray nodes (127.0.x.3, .4, ...),
its gloo sockets on each node's own address (``FAIRPOD_NODE_ADDRESS``), none on 127.0.0.1. Replica 0's training
process (the one that hosts the group's rendezvous), found through its node agent's run directory, is SIGKILLed
mid-training: the replicas on the other nodes keep their processes, replica 0 is started again by its node's agent
on the same node, hosts the rendezvous there again and gets its state from a peer's memory, a ``ReplicaRecovered``
event says so, every rank's steps run without a gap and the final model is bit for bit the undisturbed run's. Then
two replicas lost at once: the job falls back to its checkpoint by itself. Last, replica 1's node fails (an Xid
injected, found by the monitoring checks run in that node's agent): replica 1 alone leaves it for the cluster's
fourth Ray node (``ReplicaMoved``), started there by that node's agent with the attempt's rendezvous address, its
gloo sockets on its new node's address, and recovers from its peers as above.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..server.conftest import wait_for
from .cluster import RayTestCluster
from .conftest import RayServer, serving

torch = pytest.importorskip("torch", reason="torch is not installed: the DDP example cannot run")

from tests.training.peerjob import (  # noqa: E402 - torch first
    KILL_AT,
    check_fell_back,
    check_recovered,
    events,
    kill_at,
    reference_run,
    steps,
    submit,
    training_pid,
)


@pytest.fixture(scope="module")
def srv(ray_cluster: RayTestCluster, ray_driver: Any,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayServer]:
    # the monitoring checks every 0.5 s: an injected node fault is seen within a few steps of the training
    yield from serving(ray_cluster, ray_driver, tmp_path_factory.mktemp("raypeers"),
                       before_start=lambda s: s.env.update(FAIRPOD_AGENT_INTERVAL="0.5"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from reference_run(tmp_path_factory.mktemp("reference"))


def run_dirs(s: RayServer, job: dict, rank: int) -> list[Path]:
    """The run directories of ``rank`` (attempt 0) on its node: ``<node dir>/<namespace>/<job>/0/<rank>-<run>``,
    one per run its node agent started (a restart in place is a new run)."""
    return sorted((s.node_dir / s.namespace / f"{job['name']}-{job['id']}" / "0").glob(f"{rank}-*"))


def pids(s: RayServer, job: dict) -> dict[int, int | None]:
    """Host PIDs of the job's live training processes, by rank."""
    out: dict[int, int | None] = {}
    for r in range(3):
        live = [p for d in run_dirs(s, job, r) if (p := training_pid(d)) is not None]
        out[r] = live[-1] if len(live) == 1 else None
    return out


def node_ids(s: RayServer, job: dict, rank: int) -> set[str]:
    """The Ray node ids the runs of ``rank`` were started on (each run's launch, as its agent wrote it)."""
    return {json.loads((d / "launch.json").read_text())["env"]["FAIRPOD_RAY_NODE_ID"]
            for d in run_dirs(s, job, rank)}


def listening(pid: int) -> set[str]:
    """The addresses the TCP sockets of process ``pid`` listen on, but the wildcard (the rendezvous store of rank 0
    listens on every address)."""
    out = subprocess.run(["ss", "-tlnpH"], capture_output=True, text=True, timeout=30, check=True).stdout
    hosts = {ln.split()[3].rsplit(":", 1)[0].strip("[]") for ln in out.splitlines() if f"pid={pid}," in ln}
    return hosts - {"*", "0.0.0.0", "::"}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_killed_replica_on_ray_recovers_from_its_peers(srv: RayServer, reference: Path) -> None:
    job, out = submit(srv, "peers")
    placement = srv.wait_state("peers", "Running", 60)["placement"]
    ips = [srv.cluster.ips[n] for n in placement]
    assert len(set(ips)) == 3 and "127.0.0.1" not in ips, ips

    def on_node_addresses(live: dict[int, int]) -> None:
        # gloo's sockets on each node's own address, not on the one the host's name resolves to (127.0.0.1 here)
        assert [listening(live[r]) for r in range(3)] == [{ip} for ip in ips], ips

    before = kill_at(srv, out, lambda: pids(srv, job), [0], on_node_addresses)
    wait_for(lambda: events(srv, "peers", "ReplicaRecovered"), 120, "ReplicaRecovered", srv.activity)
    after = pids(srv, job)  # while the job still runs (its last steps take a few seconds)
    assert after[1] == before[1] and after[2] == before[2], (before, after)  # the healthy replicas' processes
    assert after[0] not in (None, before[0]), (before, after)  # replica 0 is a new process
    assert node_ids(srv, job, 0) == {srv.cluster.nodes[placement[0]].node_id}  # on the same Ray node
    assert listening(after[0]) == {ips[0]}  # type: ignore[arg-type]
    check_recovered(srv, "peers", out, reference, lost=0)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_replicas_lost_at_once_on_ray_fall_back_to_the_checkpoint(srv: RayServer, reference: Path) -> None:
    job, out = submit(srv, "twice")
    kill_at(srv, out, lambda: pids(srv, job), [1, 2])
    check_fell_back(srv, "twice", out, reference)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_replica_whose_ray_node_fails_comes_back_on_another_ray_node(srv: RayServer, reference: Path) -> None:
    job, out = submit(srv, "moved")
    placed = srv.wait_state("moved", "Running", 60, srv.activity)["placement"]
    spare = next(n for n, nd in srv.nodes().items() if n not in placed and nd["schedulable"])
    wait_for(lambda: len(steps(out, 0)) >= KILL_AT, 60, f"rank 0 to reach step {KILL_AT}", srv.activity)
    before = pids(srv, job)
    assert all(before.values()), before
    assert srv.cli("node", "inject-fault", placed[1], "--kind", "xid").returncode == 0
    wait_for(lambda: events(srv, "moved", "ReplicaRecovered", "JobRestarting"), 120, "ReplicaRecovered",
             srv.activity)
    assert not events(srv, "moved", "JobRestarting")  # the job did not restart whole
    after = pids(srv, job)
    assert after[0] == before[0] and after[2] == before[2], (before, after)  # the healthy replicas' processes
    assert after[1] not in (None, before[1]), (before, after)
    (moved,) = events(srv, "moved", "ReplicaMoved")
    assert (moved["data"]["source"], moved["data"]["target"]) == (placed[1], spare), moved
    assert moved["data"]["reason"].startswith(f"node {placed[1]} fault: NvidiaErrorReboot"), moved
    ids = srv.cluster.nodes
    assert node_ids(srv, job, 1) >= {ids[spare].node_id}  # the new run on the spare's Ray node, by its agent
    assert listening(after[1]) == {srv.cluster.ips[spare]}  # type: ignore[arg-type]
    check_recovered(srv, "moved", out, reference, lost=1)
    assert srv.job("moved")["placement"] == [placed[0], spare, placed[2]]


def test_replica_0_whose_ray_node_fails_restarts_the_job_whole_and_says_why(srv: RayServer) -> None:
    # rank 0's node address is the attempt's MASTER_ADDR, which the other replicas keep: it does not move on Ray
    srv.submit(name="host", team="john", nodes=2, restarts_in_place=2, auto_resume=True, max_retry=1,
               termination_grace_seconds=2, command=["python3", "-c", "import time; time.sleep(600)"])
    placed = srv.wait_state("host", "Running", 60, srv.activity)["placement"]
    assert srv.cli("node", "inject-fault", placed[0], "--kind", "xid").returncode == 0
    (fell,) = wait_for(lambda: [e for e in events(srv, "host", "ReplicaRestarting") if e["data"].get("fallback")],
                       60, "the fallback's event", srv.activity)
    assert fell["data"]["rank"] == 0 and fell["data"]["restart"] == "full", fell
    assert "replica 0 hosts the job's rendezvous" in fell["data"]["why"], fell
    wait_for(lambda: events(srv, "host", "JobRestarting"), 60, "the job to restart whole", srv.activity)
    assert not events(srv, "host", "ReplicaMoved")
    srv.api("POST", "/jobs/host/cancel")
    srv.wait_state("host", "Cancelled", 60, srv.activity)
