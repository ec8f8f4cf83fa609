"""Standby control planes (``fairpod up --ha``) with the Ray executor: two real control planes on loopback
addresses, one real PostgreSQL, the loopback Ray cluster of the Ray tests.

Jobs stream in while the leader is killed (SIGKILL) and while it is stopped past its lease with work it is about
to do, then continued after the takeover (``failover(…, "stop")`` of tests/server/ha_cluster.py). The new
leader finds the node agents by name (the same agent processes, never started again), no running job is
stopped by a takeover (a long job runs through both, once), every accepted job runs exactly once and ends in
its right state, and the old leader, once fenced, writes nothing and launches nothing (its Ray executor's own
background pass is fenced as well). The runs directory (the Ray executor's records of attempts and its copies of
the logs) is shared by the two control planes, as docs/ha.md asks.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairpod.executors.ray.agents import AGENT_TIMEOUT
from tests.server.ha_cluster import HaCluster, JobStream, check_outcome, empty_database, failover, wait_for
from tests.store.conftest import pg_url  # noqa: F401  (the fixture: a real PostgreSQL server)

from .cluster import RayTestCluster
from .conftest import WORKERS, agent_pid, all_gpus_free, remove_agents, seed_spec_data


@pytest.fixture
def ray_ha(tmp_path: Path, pg_url: str, ray_cluster: RayTestCluster,  # noqa: F811
           ray_driver: Any) -> Iterator[tuple[HaCluster, str, Path]]:
    empty_database(pg_url)
    all_gpus_free(ray_driver)  # the previous Ray test gave every GPU back
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    node_dir = tmp_path / "ray-nodes"
    cluster = HaCluster(tmp_path, pg_url, n=2, lease=3.0, env={"FAIRPOD_RAY_NODE_DIR": str(node_dir)})
    try:
        yield cluster, namespace, node_dir
    finally:
        cluster.stop_all()
        remove_agents(ray_driver, namespace, node_dir)


def test_ray_failovers_reattach_to_the_agents_and_run_every_job_once(ray_ha: tuple[HaCluster, str, Path],
                                                                    ray_cluster: RayTestCluster, ray_driver: Any):
    ha, namespace, _ = ray_ha
    data = seed_spec_data()
    data["cluster"]["executor"] = {"kind": "ray", "ray_address": ray_cluster.address, "ray_namespace": namespace}
    spec = ha.tmp / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    ha.boot(spec)
    ids = {w: ray_cluster.nodes[w].node_id for w in WORKERS}
    wait_for(lambda: ha.request("GET", "/nodes").json()["nodes"].__len__() == len(WORKERS), 60,
             "the Ray nodes to join")
    agents = {w: agent_pid(ray_driver, namespace, ids[w]) for w in WORKERS}
    ha.submit("long", seconds=600, code=0, until_released=True)  # runs through both failovers, however slow
    wait_for(lambda: (ha.marks / "long").exists(), 60, "the long job to start")
    stream = JobStream(ha)
    stream.start()
    took = {}
    try:
        stream.grown(3)
        for kind in ("kill", "stop"):  # stopped past AGENT_TIMEOUT: continued, it finds every agent silent
            took[kind] = failover(ha, kind, stopped_for=AGENT_TIMEOUT + 1)
            assert ha.request("GET", "/jobs/long").json()["state"] == "Running"
            stream.grown(2)
    finally:
        stream.stop()
    assert not stream.errors, stream.errors
    ha.release("long")  # (check_outcome waits for every job to end)
    check_outcome(ha, stream)
    # the same agent processes all along: each new leader found them by name
    assert {w: agent_pid(ray_driver, namespace, ids[w]) for w in WORKERS} == agents
    assert all("re-attached to the fairpod agent of node" in n.log_text() for n in ha.nodes)
    long = wait_for(lambda: (j := ha.request("GET", "/jobs/long").json())["state"] != "Running" and j, 60,
                    "the long job to end")
    assert long["state"] == "Succeeded" and long["restarts"] == 0, long
    assert len((ha.marks / "long").read_text().splitlines()) == 1  # never stopped, never started again
    evs = ha.request("GET", "/events", params={"limit": 2000}).json()["events"]
    assert sum(e["kind"] == "LeaderElected" for e in evs) == 3
    print("takeover with the Ray executor (lease 3 s):", ", ".join(f"{k} {t:.2f} s" for k, t in took.items()),
          [e["message"].split("; ")[-1] for e in evs if e["kind"] == "LeaderElected"])
    assert all(t < 30 for t in took.values()), took


def test_a_fenced_ray_executor_kills_nothing_of_its_own_accord(ray_cluster: RayTestCluster, ray_driver: Any,
                                                               tmp_path: Path):
    """What a control plane stopped past its lease sees when it is continued: every agent silent for longer than
    AGENT_TIMEOUT. Fenced (``set_fence``, as ``fairpod up --ha`` sets it), the executor's background pass kills no
    agent and records no exit; unfenced, the same pass kills them (so it is the fence that kept it from acting)."""
    from fairpod.executors import ExecutorError, JobLaunch, ReplicaLaunch, procs
    from fairpod.executors.ray import RayExecutor
    all_gpus_free(ray_driver)
    ns = f"x-{uuid.uuid4().hex[:10]}"
    ex = RayExecutor(tmp_path / "runs", address=ray_cluster.address, namespace=ns, node_dir=str(tmp_path / "nodes"),
                     exclusive=False)
    try:
        out = tmp_path / "pid"
        ex.launch(JobLaunch(job="steady", team="t", attempt=0, checkpoint_dir=str(tmp_path / "ck"),
                            command=["sh", "-c", f"echo $$ > {out}; exec sleep 300"],
                            replicas=(ReplicaLaunch(rank=0, node="w1", accelerators=(0,)),)))
        wait_for(lambda: out.exists() and out.read_text().strip(), 60, "the replica to start")
        pid = int(out.read_text())
        ids = {w: ray_cluster.nodes[w].node_id for w in WORKERS}
        before = {w: agent_pid(ray_driver, ns, ids[w]) for w in WORKERS}
        refused: list[str] = []

        def fence(what: str) -> None:
            refused.append(what)
            raise ExecutorError(f"{what} refused: this control plane no longer leads")

        ex.set_fence(fence)
        # As after a pause: the last sync went out long ago and has not been taken in. The pass lock too, so that
        # no pass that began before the fence takes an answer in after this (it would find that agent answering).
        with ex._pump_lock, ex._lock:
            for agent in ex._agents.values():
                agent.sync_ref = agent.sync_ref or agent.handle.sync.remote([])
                agent.sync_sent -= AGENT_TIMEOUT + 1
        for _ in range(2):
            ex._pump_once(wait=0.5)
        assert ex.poll(ack=False) == [] and ex.running() == {"steady": 0}
        assert {w: agent_pid(ray_driver, ns, ids[w]) for w in WORKERS} == before and procs.alive(pid, None)
        assert refused and all(w.startswith("the Ray executor's pass") for w in refused), refused
        ex.set_fence(None)  # the control: the same pass, unfenced, takes every agent for lost and kills it
        ex._pump_once(wait=0.5)
        lost = wait_for(lambda: ex.poll(ack=False), 30, "the replica's exit")
        assert "node lost" in lost[0].reason and "stopped answering" in lost[0].reason, lost
    finally:
        ex.close()
        remove_agents(ray_driver, ns, tmp_path / "nodes")
