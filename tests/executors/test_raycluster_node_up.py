"""A standing Ray cluster's replica (fairpod.executors.raycluster, a KubeRay RayCluster's head and worker) counts as
up only once its Ray node is ALIVE in the head's node table, and a worker whose raylet dies after ``ray start``
exited 0 starts its node again.

``ray start`` exits 0 once it has started the Ray processes, before the raylet has registered with the head; a
raylet that died then (once a fatal check where it binds its port) left the worker's launcher waiting on the head
for good, with one Ray node alive of two. Here the worker's first raylet is killed as its ``ray start`` exits (a
``sitecustomize`` of tests/executors/raylet_kill.py on the worker's ``PYTHONPATH``), and the head and the
worker are real Ray nodes on 127.0.0.1: the worker's launcher sees its raylet gone, starts its node again on other
ports, and its ready file (what the service's readiness command tests) appears only once the head's table holds
both nodes alive."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairpod.executors import raycluster
from tests import reaper

from .helpers import alive_nodes, stop_groups
from .raylet_kill import site

pytest.importorskip("ray")



@pytest.mark.timeout(400)
def test_a_worker_whose_raylet_dies_after_ray_start_starts_again_and_is_ready_only_once_alive(tmp_path: Path):
    killed = tmp_path / "killed"
    ports = raycluster._free_ports(2)
    ready = [Path(raycluster.READY.format(port=p)) for p in ports]
    base = {**os.environ, "FAIRPOD_RAY_STANDING": "1", "FAIRPOD_SERVICE_PORTS": ",".join(map(str, ports)),
            "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "FAIRPOD_VCPU_MILLI": "1000", "FAIRPOD_MEMORY_MIB": "1024"}
    base.pop("RAY_ADDRESS", None)
    worker_env = {**base, "RANK": "1", "PORT": str(ports[1]), "FPTEST_KILLED": str(killed),
                  "PYTHONPATH": os.pathsep.join([str(site(tmp_path / "site")), os.environ.get("PYTHONPATH", "")])}
    procs, logs = [], [tmp_path / "head.log", tmp_path / "worker.log"]
    try:
        for env, log in (({**base, "RANK": "0", "PORT": str(ports[0])}, logs[0]), (worker_env, logs[1])):
            with open(log, "w") as out:
                p = subprocess.Popen([sys.executable, raycluster.__file__, "--"], env=env, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
            reaper.started(p.pid)
            procs.append(p)

        def text() -> str:
            return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in logs)

        deadline = time.monotonic() + 240  # a bound: both nodes are up long before, also on a loaded machine
        while not ready[1].exists():
            assert all(p.poll() is None for p in procs), text()
            assert time.monotonic() < deadline, \
                f"the worker was never ready (Ray nodes alive: {alive_nodes(f'127.0.0.1:{ports[0]}')}):\n{text()}"
            time.sleep(0.1)
        # ready: the head's table holds both nodes alive at this moment (never the head's alone): the head's and
        # the worker's second, started after its first raylet was killed as its ray start exited (the first's
        # entry, on the same raylet port, may stand there ALIVE a while yet: until the head's health checks miss it)
        alive = alive_nodes(f"127.0.0.1:{ports[0]}")
        assert killed.exists(), text()
        assert [h for h, _, _ in alive].count(True) == 1, (alive, text())
        assert [p for h, p, t in alive if not h and t >= killed.stat().st_mtime] == [ports[1]], (alive, text())
        assert "(its raylet exited after ray start); once more" in logs[1].read_text(), text()  # ... and seen
        assert ready[0].exists(), text()  # the head's node is up too
    finally:
        stop_groups(procs)
    assert not any(r.exists() for r in ready)  # a stopped replica is not ready


SLOW_CHECK = """
import os, sys, time
if "alive" in sys.argv and os.environ.get("FPTEST_SLOW_CHECK"):
    time.sleep(float(os.environ["FPTEST_SLOW_CHECK"]))
"""


@pytest.mark.timeout(300)
def test_a_check_slow_to_start_does_not_fail_a_node_that_is_up(tmp_path: Path):
    """The node's check is a Python importing Ray's client: on a loaded machine that took longer than the node's
    NODE_UP, and nodes up long since were started again (and their head with them) for nothing. NODE_UP counts from
    when the check asks the head: here it is 30 s (the head's answer under a loaded suite takes seconds) and the
    check starts 40 s late, and the head's node is up at once."""
    port = raycluster._free_ports(1)[0]
    slow = tmp_path / "site"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(SLOW_CHECK)
    env = {**os.environ, "FAIRPOD_RAY_STANDING": "1", "FAIRPOD_SERVICE_PORTS": str(port), "WORLD_SIZE": "1",
           "RANK": "0", "PORT": str(port), "MASTER_ADDR": "127.0.0.1", "FAIRPOD_VCPU_MILLI": "1000",
           "FAIRPOD_MEMORY_MIB": "1024", "FAIRPOD_RAY_NODE_UP": "30", "FPTEST_SLOW_CHECK": "40",
           "PYTHONPATH": os.pathsep.join([str(slow), os.environ.get("PYTHONPATH", "")])}
    env.pop("RAY_ADDRESS", None)
    ready, log = Path(raycluster.READY.format(port=port)), tmp_path / "head.log"
    with open(log, "w") as out:
        p = subprocess.Popen([sys.executable, raycluster.__file__, "--"], env=env, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True)
    reaper.started(p.pid)
    try:
        deadline = time.monotonic() + 240
        while not ready.exists():
            assert p.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        text = log.read_text()
        assert "Ray node up (head" in text and "once more" not in text, text[-3000:]
    finally:
        stop_groups([p])
    assert not ready.exists()


def test_a_node_up_that_is_no_number_of_seconds_is_one_line():
    assert raycluster._node_up({}) == raycluster.NODE_UP
    assert raycluster._node_up({"FAIRPOD_RAY_NODE_UP": "30"}) == 30.0
    for bad in ("abc", "0", "-5", "inf", "nan"):
        with pytest.raises(SystemExit, match=f"FAIRPOD_RAY_NODE_UP is not a number of seconds > 0: '{bad}'"):
            raycluster._node_up({"FAIRPOD_RAY_NODE_UP": bad})
