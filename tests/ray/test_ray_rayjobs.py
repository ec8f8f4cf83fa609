"""A Ray job on the Ray executor, end to end: a fairpod server governs the loopback test Ray cluster, and a job of
kind ``ray`` starts its own, private Ray cluster inside it (head on rank 0's node, a worker on rank 1's, each Ray
node at its governing node's loopback address, on ports of its own, offering exactly the GPU its node agent gave
it: fake GPUs). Its program runs a GPU task on each of its Ray nodes, is preempted by john's reclaim (SIGTERM while
its Ray cluster still runs: it checkpoints), its Ray cluster is torn down, and it resumes on a new one from its
checkpoint once john's job is gone.

The seed cluster: four 4-GPU nodes, john's quota three of them, smith's one. smith's own node is busy with another
job, and john runs a 1-GPU replica on each of the other three (so that the Ray job's GPUs are not all GPU 0), so
smith's 2-replica Ray job (1 GPU each) borrows from john; john's 3 x 3-GPU job reclaims it.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from ..server.conftest import wait_for
from ..server.rayjob_program import PROGRAM, notes
from .conftest import WORKERS, RayServer


def allocation(server: RayServer, job: str) -> dict[str, list[str]]:
    """What fairpod gave each replica of ``job``: its node's Ray address -> the GPU ids the node agent maps its
    accelerator slots to (Ray's fake GPU ids of a test node are 0..3: slot k is GPU k)."""
    r = server.api("GET", f"/jobs/{job}/replicas")
    assert r.status_code == 200, r.text
    nodes = server.nodes()
    return {nodes[rep["node"]]["labels"]["ray_address"]: [str(a) for a in rep["accelerators"]]
            for rep in r.json()["replicas"]}


def processes_of(address: str) -> list[int]:
    """PIDs of the processes of the Ray cluster whose GCS is at ``address`` (its raylets, GCS, agents)."""
    host, port = address.rsplit(":", 1)
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"--gcs-address={address}" in cmd or f"--gcs_address={address}" in cmd or (
                "gcs_server" in cmd and f"--gcs_server_port={port}" in cmd and host in cmd):
            out.append(int(p.name))
    return out


def reachable(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def check_start(server: RayServer, start: dict[str, Any], given: dict[str, list[str]], master: str) -> None:
    """The program ran on the job's own two Ray nodes (a cluster of its own: the governing one has none more), at
    the governing nodes' addresses, with the GPUs fairpod gave each replica."""
    assert start["nodes"] == 2 and start["task_nodes"] == 2, start  # one task on each of its Ray nodes
    assert sorted(start["node_addresses"]) == sorted(given), (start, given)
    assert {ip: gpus for ip, gpus in start["tasks"]} == given, (start, given)
    assert start["node_gpus"] == [1, 1] and start["node_cpus"] == [1, 1], start
    host, port = start["address"].rsplit(":", 1)
    assert host == master and host in given  # its head: rank 0's node, on a port of its own
    assert int(port) != server.cluster.port
    assert sorted(str(n["name"]) for n in server.cluster.node_table() if n["alive"]) == sorted(["head", *WORKERS])


@pytest.mark.timeout(600)  # two Ray clusters started as replicas, each wait on the processes' progress
def test_a_ray_job_runs_its_own_ray_cluster_on_the_ray_executor_is_preempted_and_resumes(
        ray_server: RayServer, tmp_path: Path):
    wait_for(lambda: set(ray_server.nodes()) == set(WORKERS) and all(
        n["schedulable"] for n in ray_server.nodes().values()), 30, "the four Ray nodes")
    ray_server.submit(name="smith-own", team="smith", nodes=1, command=["sleep", "600"])
    ray_server.submit(name="john-small", team="john", nodes=3, accelerators=1, command=["sleep", "600"])
    ray_server.wait_state("smith-own", "Running")
    ray_server.wait_state("john-small", "Running")
    out, prog = tmp_path / "ray.log", tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    ray_server.cli("start-job", "--name", "rl", "--team", "smith", "--node-count", "2", "--ray", "--accelerators",
                   "1", "--vcpu", "1", "--memory", "3Gi", "--grace-seconds", "20", "--",
                   sys.executable, str(prog), str(out))
    (start,) = wait_for(lambda: notes(out, "start") or ray_server.job("rl")["state"] not in ("Pending", "Running")
                        and [ray_server.job("rl")], 180, "the Ray program to start", ray_server.activity)
    # the program's note, not the job ended before it started (then its state and reason, whole: pytest cuts a dict)
    assert "address" in start, f"job rl ended before its program started: {start.get('state')}: {start.get('reason')}"
    job = ray_server.job("rl")
    assert job["kind"] == "ray" and job["borrowed_from"] == {"john": 2}
    given = allocation(ray_server, "rl")
    assert any(g != ["0"] for g in given.values()), given  # john's replicas hold GPUs of the same nodes
    rank0 = ray_server.nodes()[job["placement"][0]]["labels"]["ray_address"]
    check_start(ray_server, start, given, rank0)
    assert start["step"] == 0 and reachable(start["address"]) and processes_of(start["address"])

    ray_server.submit(name="john-big", team="john", nodes=3, accelerators=3, termination_grace_seconds=1,
                      command=["sleep", "300"])
    (term,) = wait_for(lambda: notes(out, "term"), 60, "the entrypoint's SIGTERM")
    assert term["nodes"] == 2 and term["step"] > 0  # its Ray cluster still ran when the entrypoint got SIGTERM
    ray_server.wait_state("john-big", "Running", 60)
    rl = ray_server.job("rl")
    assert rl["preemptions"] == 1
    why = [e["message"] for e in rl["events"] if e["kind"] == "JobPreempted"]
    assert len(why) == 1 and "reclaimed by team john" in why[0], why
    # the preempted job's Ray cluster is gone: its head's port closed, none of its processes left on the nodes
    wait_for(lambda: not reachable(start["address"]) and not processes_of(start["address"]), 30,
             "the first Ray cluster to be torn down")

    ray_server.api("POST", "/jobs/john-big/cancel")  # the capacity is free again: a new Ray cluster, same checkpoint
    done = ray_server.wait_state("rl", "Succeeded", timeout=180, progress=ray_server.activity)
    starts = notes(out, "start")
    assert len(starts) == 2 and starts[1]["step"] == term["step"]
    check_start(ray_server, starts[1], allocation(ray_server, "rl"),
                ray_server.nodes()[done["placement"][0]]["labels"]["ray_address"])
    assert notes(out, "done")[0]["step"] == term["step"] + 3
    assert done["preemptions"] == 1
    wait_for(lambda: not processes_of(starts[1]["address"]), 30, "the second Ray cluster to be torn down")
