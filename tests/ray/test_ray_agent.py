"""The fairpod node agent: one per Ray node. Killing its process (by PID) or freezing it is a node fault, like a
lost Ray node: the node is unschedulable, the replicas it ran end (their supervisors watch the agent), the job
resumes elsewhere from its checkpoint; a new agent is started and the node goes back into service."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from fairpod.executors import procs

from ..server.conftest import wait_for
from .conftest import RayServer, agent_pid
from .programs import TRAINER


def _resilient_job(s: RayServer, tmp_path: Path, name: str) -> tuple[dict[str, Any], Path]:
    trainer = tmp_path / "trainer.py"
    trainer.write_text(TRAINER)
    s.submit(name=name, team="john", nodes=2, auto_resume=True, max_retry=2, termination_grace_seconds=5,
             command=[sys.executable, str(trainer), "100000", "pids"])
    job = s.wait_state(name, "Running", 30)
    ckpt = Path(s.home) / "checkpoints" / "john" / f"{name}-{job['id']}"
    wait_for(lambda: len(list(ckpt.glob("rank?.txt"))) == 2 and all(
        int((ckpt / f"rank{r}.txt").read_text() or 0) >= 20 for r in (0, 1)), 30, "both replicas to checkpoint")
    return job, ckpt


def _faulted_then_back(s: RayServer, name: str, victim: str, old_pids: list[int], why: str) -> None:
    node = wait_for(lambda: (n := s.nodes()[victim])["fault_type"] == "NodeLost" and n, 30,
                    f"node {victim} to be a fault")
    assert not node["schedulable"] and why in node["fault_reason"], node
    resumed = wait_for(lambda: (j := s.job(name))["restarts"] == 1 and j["state"] == "Running" and j, 40,
                       "the job to restart")
    assert victim not in resumed["placement"], resumed["placement"]
    # the replica the agent ran (and its setsid grandchild) ended: its supervisor watched the agent's process
    wait_for(lambda: not any(procs.alive(p, None) for p in old_pids), 30, "the agent's replica processes to end")
    logs = wait_for(lambda: (o := s.cli("get-logs", name).stdout) and "restart=1" in o and o, 30,
                    "the resumed replica's log")
    assert "start step=0 restart=1" not in logs  # resumed from its checkpoint
    # a new agent is started on the node, which goes back into service
    wait_for(lambda: s.nodes()[victim]["schedulable"], 60, f"node {victim} to be back in service")


def test_a_killed_node_agent_is_a_node_fault_and_its_job_resumes_elsewhere(ray_server: RayServer, ray_driver,
                                                                          tmp_path: Path):
    job, ckpt = _resilient_job(ray_server, tmp_path, "agentless")
    victim = job["placement"][0]
    node_id = ray_server.cluster.nodes[victim].node_id
    old_pids = [int(p) for p in (ckpt / "pids-rank0.txt").read_text().split()]
    pid = agent_pid(ray_driver, ray_server.namespace, node_id)
    assert all(procs.alive(p, None) for p in old_pids) and procs.alive(pid, None)
    os.kill(pid, signal.SIGKILL)
    _faulted_then_back(ray_server, "agentless", victim, old_pids, "fairpod agent died")
    new_pid = agent_pid(ray_driver, ray_server.namespace, node_id)
    assert new_pid != pid and procs.alive(new_pid, None)
    events = ray_server.api("GET", "/events", params={"limit": 500}).json()["events"]
    assert any(e["kind"] == "NodeFault" and e["node"] == victim for e in events)


def test_a_node_agent_that_stops_answering_is_a_node_fault(ray_server: RayServer, ray_driver, tmp_path: Path):
    job, ckpt = _resilient_job(ray_server, tmp_path, "frozen")
    victim = job["placement"][1]
    node_id = ray_server.cluster.nodes[victim].node_id
    old_pids = [int(p) for p in (ckpt / "pids-rank1.txt").read_text().split()]
    pid = agent_pid(ray_driver, ray_server.namespace, node_id)
    os.kill(pid, signal.SIGSTOP)  # alive, but it answers nothing
    try:
        _faulted_then_back(ray_server, "frozen", victim, old_pids, "stopped answering")
    finally:
        if procs.alive(pid, None):
            os.kill(pid, signal.SIGKILL)
    assert agent_pid(ray_driver, ray_server.namespace, node_id) != pid
