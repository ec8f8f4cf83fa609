"""A Ray job's own Ray cluster (fairpod.executors.raycluster) keeps a worker whose raylet does not answer the head's
health checks for a while: on a loaded machine a worker's raylet, starved of CPU in its replica, missed them for a
minute, Ray's own limit (5 checks of 10 s), the head marked the node dead, and the job's program ran on one Ray node
of two (CI: ``tests/ray/test_ray_rayjobs.py``, its resumed program's ``ray.nodes()`` held the head only). fairpod
gives its clusters' GCS 10 checks of 30 s (``raycluster.HEALTH``).

Here the head and the worker are real Ray nodes on 127.0.0.1, started by the launcher as a job's two replicas are;
once the entrypoint's driver is connected, the worker's raylet is stopped (SIGSTOP) for 90 s, longer than Ray's
default lets a node miss its checks, and continued; the entrypoint then finds both nodes alive and runs a task on the
worker's. A worker whose raylet dies (SIGKILL) joins the head again as a new Ray node, which then runs the task."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fairpod.executors import raycluster
from tests import reaper

from .helpers import alive_nodes, stop_groups

pytest.importorskip("ray")
# one Ray cluster at a time of this file's, beside the rayjobs group's (a raylet stopped 90 s costs no CPU)
pytestmark = pytest.mark.xdist_group("rayhealth")

STARVED = 90.0  # seconds the worker's raylet is stopped: Ray's default marks it dead after about 62 s

ENTRYPOINT = """
import json, os, sys, time
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
go, out = sys.argv[1], sys.argv[2]
ray.init(log_to_driver=False)
open(out + ".connected", "w").close()
deadline = time.monotonic() + 900
def nodes():
    alive = [n for n in ray.nodes() if n["Alive"]]
    return alive, [n["NodeID"] for n in alive if not n["Resources"].get("node:__internal_head__")]
first = nodes()[1]
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.2)
deadline = time.monotonic() + float(sys.argv[3])  # for a worker that is not one of the first, when there is none
while (alive := nodes())[0] and time.monotonic() < deadline and not (len(alive[0]) == 2 and (
        set(alive[1]) - set(first))):
    time.sleep(0.5)
alive, workers = nodes()
@ray.remote(num_cpus=0)
def where():
    return ray.get_runtime_context().get_node_id()
ran = [ray.get(where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(w, soft=False)).remote(), timeout=300)
       for w in workers]
with open(out + ".tmp", "w") as f:
    json.dump({"alive": len(alive), "first": first, "workers": workers, "ran": ran}, f)
os.replace(out + ".tmp", out)
"""


def _raylet_of(port: int) -> int | None:
    """The PID of the raylet serving node-manager port ``port`` (read from /proc), None when there is none."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "comm").read_text().strip() != "raylet":
                continue
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"--node_manager_port={port}".encode() in cmd:
            return int(d.name)
    return None


def _worker_port(gcs: str) -> int | None:
    ports = [port for head, port, _ in alive_nodes(gcs) if not head]
    return ports[0] if len(ports) == 1 else None


def _run(tmp_path: Path, fault: Callable[[int], None], new_worker: float) -> tuple[dict, str]:
    """A job's two Ray nodes on 127.0.0.1 (head and worker, each started by the launcher) and its entrypoint; once
    the entrypoint's driver is connected, ``fault(the worker's raylet PID)``; then the entrypoint waits up to
    ``new_worker`` seconds for two nodes alive, one a worker it had not seen, and runs a task on each worker.
    What it saw, and the launchers' logs."""
    port = raycluster._free_ports(1)[0]
    program, go, out = tmp_path / "prog.py", tmp_path / "go", tmp_path / "out.json"
    program.write_text(ENTRYPOINT)
    base = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "FAIRPOD_VCPU_MILLI": "1000", "FAIRPOD_MEMORY_MIB": "1024"}
    base.pop("RAY_ADDRESS", None)
    procs, logs = [], [tmp_path / "head.log", tmp_path / "worker.log"]

    def text() -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-8000:]}" for log in logs)

    try:
        for rank, log in enumerate(logs):
            with open(log, "w") as f:
                p = subprocess.Popen([sys.executable, raycluster.__file__, "--", sys.executable, str(program),
                                      str(go), str(out), str(new_worker)], env={**base, "RANK": str(rank)},
                                     stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
            reaper.started(p.pid)
            procs.append(p)
        deadline = time.monotonic() + 400  # a bound: the driver connects long before, also on a loaded machine
        while not (tmp_path / "out.json.connected").exists():
            assert procs[0].poll() is None and time.monotonic() < deadline, text()
            time.sleep(0.2)
        worker = _worker_port(f"127.0.0.1:{port}")
        raylet = _raylet_of(worker) if worker is not None else None
        assert raylet is not None, (worker, text())
        fault(raylet)
        go.touch()
        deadline = time.monotonic() + new_worker + 400
        while not out.exists():
            assert procs[0].poll() is None and time.monotonic() < deadline, text()
            time.sleep(0.2)
        assert procs[0].wait(timeout=120) == 0, text()
        return json.loads(out.read_text()), text()
    finally:
        stop_groups(procs)


def _starve(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(STARVED)  # the fault itself lasts this long: no event to wait for
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.mark.timeout(600)
def test_a_worker_whose_raylet_is_starved_longer_than_rays_default_stays_in_its_job(tmp_path: Path):
    got, logs = _run(tmp_path, _starve, new_worker=0)
    assert got["alive"] == 2 and got["workers"] == got["first"] == got["ran"] and len(got["first"]) == 1, \
        (got, logs)
    assert "raylet is gone" not in logs, logs


@pytest.mark.timeout(900)
def test_a_worker_whose_raylet_dies_joins_its_head_again_as_a_new_node(tmp_path: Path):
    got, logs = _run(tmp_path, lambda pid: os.kill(pid, signal.SIGKILL), new_worker=300)
    assert got["alive"] == 2 and len(got["workers"]) == 1 and got["workers"] != got["first"], (got, logs)
    assert got["ran"] == got["workers"], (got, logs)  # the new node runs the job's tasks
    assert "rank 1: the Ray node's raylet is gone; joining the head again (1 of 3); its log ends:" in logs, logs
    assert "  raylet.out: " in logs, logs  # what Ray said last, in the replica's log
