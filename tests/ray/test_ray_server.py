"""A real fairpod server on a real multi-node Ray cluster: the seed scenario across Ray nodes, a 2-replica
job's rendezvous across two nodes, and a Ray node lost mid-job."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from fairpod.executors import procs

from ..server.conftest import wait_for
from .conftest import WORKERS, RayServer, agent_pid, agents, ray_state
from .programs import RENDEZVOUS, TICKER, TRAINER


def _line(text: str, tag: str) -> dict[str, Any]:
    return json.loads(next(ln for ln in text.splitlines() if ln.startswith(tag + " "))[len(tag) + 1:])


def test_two_replicas_on_two_ray_nodes_meet_at_the_rendezvous(ray_server: RayServer, tmp_path: Path):
    script = tmp_path / "rdv.py"
    script.write_text(RENDEZVOUS)
    ray_server.submit(name="pair", team="john", nodes=2, command=[sys.executable, str(script)])
    done = ray_server.wait_state("pair", "Succeeded", 60)
    a, b = done["placement"]
    assert a != b and {a, b} <= set(WORKERS)
    logs = [ray_server.cli("get-logs", "pair", "--replica", str(r)).stdout for r in (0, 1)]
    env = [_line(t, "env") for t in logs]
    peer = [_line(t, "peer") for t in logs]
    ids = {w: ray_server.cluster.nodes[w].node_id for w in WORKERS}
    for rank in (0, 1):
        assert env[rank]["RANK"] == str(rank) and env[rank]["WORLD_SIZE"] == "2"
        assert env[rank]["FAIRPOD_NODE"] == done["placement"][rank]
        assert env[rank]["FAIRPOD_RAY_NODE_ID"] == ids[done["placement"][rank]]  # on the node the engine chose
        assert len(env[rank]["CUDA_VISIBLE_DEVICES"].split(",")) == 4  # Ray's 4 GPUs of that node
        assert env[rank]["MASTER_ADDR"] == ray_server.cluster.ips[a]  # the rank-0 node's own address
        assert peer[rank] == env[1 - rank]  # each got the other's message through MASTER_ADDR:MASTER_PORT
    assert env[0]["MASTER_PORT"] == env[1]["MASTER_PORT"]
    assert env[0]["FAIRPOD_RAY_NODE_ID"] != env[1]["FAIRPOD_RAY_NODE_ID"]


def test_a_lost_ray_node_is_a_fault_and_its_job_resumes_elsewhere(ray_server: RayServer, tmp_path: Path):
    trainer = tmp_path / "trainer.py"
    trainer.write_text(TRAINER)
    ray_server.submit(name="resilient", team="john", nodes=2, auto_resume=True, max_retry=2,
                      termination_grace_seconds=5, command=[sys.executable, str(trainer), "100000", "pids"])
    job = ray_server.wait_state("resilient", "Running", 30)
    victim, survivor = job["placement"]
    # both replicas have run a while and checkpointed (every 20 steps)
    ckpt = Path(ray_server.home) / "checkpoints" / "john" / f"resilient-{job['id']}"
    wait_for(lambda: all(int((ckpt / f"rank{r}.txt").read_text() or 0) >= 40
                         for r in (0, 1) if (ckpt / f"rank{r}.txt").exists()) and
             len(list(ckpt.glob("rank*.txt"))) == 2, 30, "both replicas to checkpoint")
    pid_file = ckpt / "pids-rank0.txt"
    old_pids = [int(p) for p in pid_file.read_text().split()]  # the rank-0 replica and its setsid grandchild
    assert all(procs.alive(p, None) for p in old_pids)

    t0 = time.monotonic()
    ray_server.cluster.kill_node(victim)
    try:
        # the node is a fault within seconds: unschedulable, its job stops and restarts on the other nodes
        node = wait_for(lambda: (n := ray_server.nodes()[victim])["fault_type"] in ("NodeLost", "HeartbeatLost")
                        and n, 20, f"node {victim} to be marked lost")
        seen_after = time.monotonic() - t0
        assert not node["schedulable"] and "Ray node lost" in node["fault_reason"], node
        resumed = wait_for(lambda: (j := ray_server.job("resilient"))["restarts"] == 1 and j["state"] == "Running"
                           and j, 40, "the job to restart")
        assert victim not in resumed["placement"], resumed["placement"]
        restart = next(e["message"] for e in resumed["events"] if e["kind"] == "JobRestarting")
        assert victim in restart, restart
        # the lost node's replica processes (its own and its setsid grandchild) do not outlive the node
        wait_for(lambda: not any(procs.alive(p, None) for p in old_pids), 30, "the lost node's processes to end")
        # the new attempt started from the checkpoints of the old one
        logs = wait_for(lambda: (o := ray_server.cli("get-logs", "resilient").stdout) and "restart=1" in o and o,
                        30, "the resumed replica's log")
        resumed_at = int(logs.split("restart=1")[0].rsplit("start step=", 1)[1].split()[0])
        assert resumed_at >= 40, logs[-2000:]
        items = ray_server.api("GET", "/events", params={"limit": 500}).json()["events"]
        assert any(e["kind"] == "NodeFault" and e["node"] == victim for e in items)
        print(f"node loss seen by fairpod after {seen_after:.1f} s")
    finally:
        # the node comes back under the same name (also if the test failed: later tests need four nodes)
        ray_server.cluster.stop_node(victim)
        ray_server.cluster.add_node(victim)
    # ... and it is the same fairpod node, in service again
    wait_for(lambda: ray_server.nodes()[victim]["schedulable"], 20, f"node {victim} to be back in service", ray_server.activity)
    back = ray_server.nodes()[victim]
    assert back["fault_type"] is None and back["health_status"] == "Schedulable"


def test_the_control_plane_restarts_without_stopping_ray_jobs(ray_server: RayServer, ray_driver, tmp_path: Path):
    script = tmp_path / "ticker.py"
    script.write_text(TICKER)
    out = tmp_path / "out"
    out.mkdir()
    ray_server.submit(name="steady", team="smith", nodes=2, command=[sys.executable, str(script), "300", "0", str(out)])
    ray_server.wait_state("steady", "Running")
    wait_for(lambda: len(list(out.glob("pid*"))) == 2, 30, "both replicas to start")
    pids = [int((out / f"pid{r}").read_text()) for r in (0, 1)]
    ids = {w: ray_server.cluster.nodes[w].node_id for w in WORKERS}
    before = {w: agent_pid(ray_driver, ray_server.namespace, ids[w]) for w in WORKERS}
    ray_server.kill()  # SIGKILL: the control plane (a Ray driver) is gone at once
    time.sleep(1.0)
    assert all(procs.alive(p, None) for p in pids)  # the replicas do not depend on the control plane
    assert ray_state(ray_driver, ray_server.namespace) == ([], [])  # no actor, no placement group per replica
    assert set(agents(ray_driver, ray_server.namespace)) == set(ids.values())  # one agent per node, still there
    ray_server.start()  # a new control plane re-attaches to the agents
    job = ray_server.job("steady")
    assert job["state"] == "Running" and job["restarts"] == 0
    assert all(procs.alive(p, None) for p in pids)
    # the same agent processes: found by name, not started again
    assert {w: agent_pid(ray_driver, ray_server.namespace, ids[w]) for w in WORKERS} == before
    done = ray_server.wait_state("steady", "Succeeded", 120)
    assert done["restarts"] == 0
    for r in (0, 1):
        log = ray_server.cli("get-logs", "steady", "--replica", str(r)).stdout
        ticks = [int(m) for m in re.findall(r"^tick (\d+)$", log, re.M)]
        assert ticks == list(range(300)), ticks  # every line once, before and after the restart


def test_ray_nodes_join_fairpod_or_are_ignored_with_a_reason(ray_server: RayServer):
    t0 = time.monotonic()
    ray_server.cluster.add_nodes([("j2", "ml.g5.12xlarge", 4, False, 1), ("j3", "no-such-type", 4, False, 1),
                                  ("j4", "ml.g5.12xlarge", 2, True, 1)])
    try:
        up = time.monotonic()
        # listed, and in the engine's view (its accelerators: a node listed from the store before the turn that
        # takes it in has none yet, ``as_of`` says which turn a node's view is of)
        node = wait_for(lambda: (n := ray_server.nodes().get("j2")) and n["accelerators"] is not None and n, 10,
                        "j2 to join fairpod", lambda: ray_server.cluster.cpu("j2"))  # its agent: a Python worker
        # Ray starts on j2
        print(f"j2 listed {time.monotonic() - up:.1f} s after Ray had it ({up - t0:.1f} s to start the nodes)")
        assert node["instance_type"] == "ml.g5.12xlarge" and node["schedulable"] and node["accelerators"] == 4

        def ignored() -> dict[str, str]:
            items = ray_server.api("GET", "/events", params={"limit": 500}).json()["events"]
            return {e["node"]: e["message"] for e in items if e["kind"] == "NodeIgnored"}

        why = wait_for(lambda: (i := ignored()) and {"j3", "j4"} <= set(i) and i, 10, "the NodeIgnored events")
        assert "unknown instance type 'no-such-type'" in why["j3"]
        assert "it has 2 GPUs and ml.g5.12xlarge has 4" in why["j4"]
        assert not {"j3", "j4"} & set(ray_server.nodes())
        cap = ray_server.api("GET", "/cluster").json()["capacity"]["ml.g5.12xlarge"]
        assert cap["nodes"] == 5 and cap["accelerators"] == 20
        # applying a spec leaves the Ray nodes alone (its instance group is capacity, not nodes)
        ray_server.cli("node", "cordon", "j2")
        spec = yaml.safe_load(ray_server.spec.read_text())
        spec["teams"][0]["fair_share_weight"] = 7
        changed = ray_server.home.parent / "changed.yaml"
        changed.write_text(yaml.safe_dump(spec))
        ray_server.cli("apply", "-f", str(changed))
        time.sleep(1.0)
        nodes = ray_server.nodes()
        assert set(nodes) == {*WORKERS, "j2"} and nodes["j2"]["cordoned"], nodes
        joined = [e for e in ray_server.api("GET", "/events", params={"limit": 500}).json()["events"]
                  if e["kind"] == "NodeJoined" and e["node"] == "j2"]
        assert len(joined) == 1
        ray_server.cluster.kill_node("j2")
        node = wait_for(lambda: (n := ray_server.nodes()["j2"])["fault_type"] and n, 15, "j2 to be lost")
        assert node["fault_type"] in ("NodeLost", "HeartbeatLost") and not node["schedulable"]
        cap = ray_server.api("GET", "/cluster").json()["capacity"]["ml.g5.12xlarge"]
        assert cap["schedulable_accelerators"] == 16
    finally:
        for name in ("j2", "j3", "j4"):
            if name in ray_server.cluster.nodes:
                ray_server.cluster.stop_node(name)
