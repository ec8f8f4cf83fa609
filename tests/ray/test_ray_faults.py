"""Faults of the Ray executor's node agents: many launches at once on fresh agents (their threads share one fork
server), and one agent death, which must cost one retry, not two."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from fairpod.executors import procs

from ..server.conftest import wait_for
from .conftest import FINISHED, RayServer, agent_pid
from .programs import TRAINER


def test_twenty_jobs_submitted_together_to_fresh_agents_all_launch(ray_server: RayServer):
    names = [f"burst-{i}" for i in range(20)]
    for i, name in enumerate(names):  # fresh agents: none has started its fork server yet
        ray_server.submit(name=name, team="john" if i % 2 else "smith", accelerators=1,
                          command=["sh", "-c", "sleep 2; echo done"])
    jobs = wait_for(lambda: (js := {j["name"]: j for j in ray_server.jobs()}) and all(
        js[n]["state"] in FINISHED for n in names) and js, 120, "all 20 jobs to finish")
    failed = {n: jobs[n]["reason"] for n in names if jobs[n]["state"] != "Succeeded"}
    assert failed == {}, failed
    assert all(jobs[n]["restarts"] == 0 for n in names)


def test_a_failed_launch_gives_the_error_raised_in_the_agent_not_rays_header(ray_server: RayServer):
    # a file where the agents make the job's run directory: NodeAgent.start raises in the agent
    (ray_server.node_dir / ray_server.namespace / "blocked-1").write_text("in the way\n")
    job = ray_server.submit(name="blocked", team="john", accelerators=1, command=["true"])
    assert job["id"] == 1
    job = ray_server.wait_state("blocked", "Failed", 60)
    reason = job["reason"]
    assert "could not start on node" in reason and "ray::" not in reason and "pid=" not in reason, reason
    assert "Error" in reason and "blocked-1" in reason, reason  # e.g. NotADirectoryError: [Errno 20] ...


def test_one_agent_death_costs_one_retry(ray_server: RayServer, ray_driver, tmp_path: Path):
    s = ray_server
    trainer = tmp_path / "trainer.py"
    trainer.write_text(TRAINER)
    s.submit(name="wall", team="smith", nodes=2, command=["sleep", "600"])  # two of the four nodes are taken
    s.wait_state("wall", "Running", 30)
    s.submit(name="filler", team="john", command=["sleep", "600"])  # and a third
    s.wait_state("filler", "Running", 30)
    s.submit(name="once", team="john", auto_resume=True, max_retry=1, termination_grace_seconds=5,
             command=[sys.executable, str(trainer), "100000", "pids"])
    job = s.wait_state("once", "Running", 30)
    ckpt = Path(s.home) / "checkpoints" / "john" / f"once-{job['id']}"
    wait_for(lambda: len(list(ckpt.glob("rank?.txt"))) == 1, 30, "the replica to checkpoint")
    victim = job["placement"][0]
    pid = agent_pid(ray_driver, s.namespace, s.cluster.nodes[victim].node_id)
    assert procs.alive(pid, None)
    os.kill(pid, signal.SIGKILL)
    # the only free node is the dead one: were it still schedulable when the replica's exit is taken, the job
    # would start there again at once (rather than reclaim its quota from "wall"), fail to launch, and with
    # --max-retry 1 end Failed
    resumed = wait_for(lambda: (j := s.job("once"))["state"] in ("Running", *FINISHED) and j["restarts"] >= 1 and j,
                       60, "the job to restart")
    assert resumed["state"] == "Running" and resumed["restarts"] == 1, resumed
    assert victim not in resumed["placement"], resumed["placement"]
    assert s.nodes()[victim]["fault_type"] == "NodeLost" or s.nodes()[victim]["schedulable"]
    wait_for(lambda: "restart=1" in s.cli("get-logs", "once").stdout, 40, "the resumed replicas to run")
    after = s.job("once")
    assert after["state"] == "Running" and after["restarts"] == 1, after
    s.cancel_all()
