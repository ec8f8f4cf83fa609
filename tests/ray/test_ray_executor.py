"""The Ray executor on its own, against the test Ray cluster: stop and clean-up (whole process tree, placement
group, actors, GPUs back), launches on nodes Ray does not have, exactly-once exits across executors,
``run_on_node``, the node table, and that the whole cluster stays on loopback."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fairpod.executors import ExecutorError, JobLaunch, ReplicaExit, ReplicaLaunch, procs
from fairpod.executors.ray import RayExecutor

from ..server.conftest import wait_for
from .cluster import RayTestCluster
from .conftest import agents, all_gpus_free, assert_clean, free_gpus, ray_state, remove_agents
from .programs import TICKER

STUBBORN = r'''
import os, pathlib, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, lambda *a: print("ignoring SIGTERM", flush=True))
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)"], start_new_session=True)
pathlib.Path(sys.argv[1], f"pids{os.environ['RANK']}").write_text(f"{os.getpid()} {child.pid}")
print("gpus", os.environ["CUDA_VISIBLE_DEVICES"], "accel", os.environ["FAIRPOD_ACCELERATORS"], flush=True)
while True:
    time.sleep(0.1)
'''



@pytest.fixture
def ray_ex(ray_cluster: RayTestCluster, ray_driver: Any, tmp_path: Path) -> Iterator[RayExecutor]:
    all_gpus_free(ray_driver)
    ns = f"x-{uuid.uuid4().hex[:10]}"
    ex = RayExecutor(tmp_path / "runs", address=ray_cluster.address, namespace=ns, node_dir=str(tmp_path / "nodes"))
    yield ex
    try:
        if not ex._closed.is_set():
            for job, attempt in ex.running().items():
                ex.stop(job, attempt, 0.0)
            wait_for(lambda: not ex.running(), 30, "every replica to end")
        assert_clean(ray_driver, ns)
    finally:
        ex.close()
        remove_agents(ray_driver, ns, tmp_path / "nodes")


def launch(job: str, command: list[str], nodes: list[str], tmp: Path, *, gpus: int = 4, attempt: int = 0,
           grace: float = 30.0) -> JobLaunch:
    return JobLaunch(job=job, team="t", attempt=attempt, command=command, checkpoint_dir=str(tmp / "ck" / job),
                     grace_seconds=grace,
                     replicas=tuple(ReplicaLaunch(rank=i, node=n, accelerators=tuple(range(gpus)))
                                    for i, n in enumerate(nodes)))


def collect(ex: RayExecutor, n: int, timeout: float = 30.0) -> list[ReplicaExit]:
    got: list[ReplicaExit] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += ex.poll()
        time.sleep(0.05)
    assert len(got) == n, f"expected {n} exits, got {got}"
    return got


def test_stop_ends_the_whole_tree_and_gives_everything_back(ray_ex: RayExecutor, ray_driver, tmp_path: Path):
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    out = tmp_path / "out"
    out.mkdir()
    ray_ex.launch(launch("stubborn-1", [sys.executable, str(script), str(out)], ["w1", "w2"], tmp_path, gpus=2))
    assert ray_ex.running() == {"stubborn-1": 0}
    with pytest.raises(ExecutorError, match="still running"):
        ray_ex.launch(launch("stubborn-1", ["true"], ["w3"], tmp_path))
    wait_for(lambda: all((out / f"pids{r}").exists() for r in (0, 1)), 30, "both replicas to start")
    pids = [int(p) for r in (0, 1) for p in (out / f"pids{r}").read_text().split()]
    assert all(procs.alive(p, None) for p in pids)
    # one agent per node (it holds the node's GPUs in Ray: none is left for work fairpod does not manage);
    # no actor and no placement group per replica
    live = {n.node_id for n in ray_ex.cluster_nodes() if n.alive}
    assert set(agents(ray_driver, ray_ex.namespace)) == live and len(live) >= 4
    assert free_gpus(ray_driver) == 0
    assert ray_state(ray_driver, ray_ex.namespace) == ([], [])

    t0 = time.monotonic()
    ray_ex.stop("stubborn-1", 0, grace_seconds=1.0)
    exits = collect(ray_ex, 2, 30)
    took = time.monotonic() - t0
    assert sorted(e.rank for e in exits) == [0, 1]
    assert all(e.reason == "killed by SIGKILL" and e.signal == 9 for e in exits), exits
    assert took < 10, took
    # the replica, its setsid grandchild: all gone (SIGTERM ignored by both, so SIGKILL after the grace)
    assert not any(procs.alive(p, None) for p in pids)
    assert ray_ex.running() == {}
    assert_clean(ray_driver, ray_ex.namespace, 15)
    for r in (0, 1):
        log = ray_ex.log_path("stubborn-1", r).read_text()
        assert "ignoring SIGTERM" in log and "grace period over" in log and "replica ended" in log
        assert "gpus 0,1 accel 0,1" in log  # fairpod's slots 0 and 1 of the node's 4 GPUs
    assert ray_ex.poll() == []  # each exit once


def test_a_launch_on_a_node_ray_does_not_have_ends_with_node_lost(ray_ex: RayExecutor, tmp_path: Path):
    ray_ex.launch(launch("ghost-1", ["true"], ["w1", "no-such-node"], tmp_path))
    exits = sorted(collect(ray_ex, 2, 10), key=lambda e: e.rank)
    assert exits[1].reason == "node lost: node no-such-node is not in the Ray cluster"
    assert exits[0].reason.startswith("not started: node no-such-node")
    assert not any(e.ok for e in exits)


def test_exits_are_reported_once_across_executors(ray_cluster: RayTestCluster, ray_ex: RayExecutor,
                                                  ray_driver, tmp_path: Path):
    script = tmp_path / "ticker.py"
    script.write_text(TICKER)
    ray_ex.launch(launch("long-1", [sys.executable, str(script), "40", "0"], ["w1"], tmp_path))
    ray_ex.launch(launch("short-1", [sys.executable, str(script), "5", "3"], ["w2"], tmp_path))
    wait_for(lambda: "tick 1" in (ray_ex.log_path("long-1").read_text()), 30, "the long job's output")
    root, ns, nodes = ray_ex.root, ray_ex.namespace, ray_ex.node_dir
    ray_ex.close()  # nobody polls while short-1 ends; long-1 goes on
    time.sleep(2.0)
    ex2 = RayExecutor(root, address=ray_cluster.address, namespace=ns, node_dir=nodes)
    try:
        exits = ex2.adopt()
        assert [(e.job, e.rank, e.returncode) for e in exits] == [("short-1", 0, 3)]
        assert ex2.running() == {"long-1": 0}
        done = collect(ex2, 1, 30)
        assert (done[0].job, done[0].returncode) == ("long-1", 0)
        log = ex2.log_path("long-1").read_text()
        ticks = [int(m) for m in re.findall(r"^tick (\d+)$", log, re.M)]
        assert ticks == list(range(40)), ticks  # the copy of the log has every line once, across the switch
        assert "tick 4" in ex2.log_path("short-1").read_text()
    finally:
        ex2.close()
    ex3 = RayExecutor(root, address=ray_cluster.address, namespace=ns, node_dir=nodes)
    try:
        assert ex3.adopt() == [] and ex3.running() == {}
        assert_clean(ray_driver, ns)
    finally:
        ex3.close()


class _NoStart:
    """An agent's handle whose ``start`` is never sent: the control plane dies before its Ray call leaves."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.sent: list[tuple[Any, ...]] = []
        self.start = SimpleNamespace(remote=lambda *a: self.sent.append(a))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def test_a_start_that_never_reached_its_agent_is_adopted_as_never_started(ray_cluster: RayTestCluster,
                                                                          ray_ex: RayExecutor, ray_driver: Any,
                                                                          tmp_path: Path):
    """The control plane recorded a launch and died before its start reached the node's agent: the next
    executor's adoption finds that the agent never heard of the replica and reports an exit that says it
    never started (the control plane queues the job again instead of failing it), and tells the agent to stop
    it, so that the old start, should it still arrive, never runs it."""
    script = tmp_path / "ticker.py"
    script.write_text(TICKER)
    ray_ex._closed.set()  # nobody pumps from here on: this executor's control plane is about to die
    ray_ex._wake.set()
    ray_ex._thread.join(timeout=10)
    wait_for(lambda: "w1" in ray_ex._by_name and ray_ex._by_name["w1"].node_id in ray_ex._agents, 30, "w1's agent")
    agent = ray_ex._agents[ray_ex._by_name["w1"].node_id]
    agent.handle = _NoStart(agent.handle)
    job = launch("lost-1", [sys.executable, str(script), "3", "0"], ["w1"], tmp_path)
    ray_ex.launch(job)
    assert len(agent.handle.sent) == 1 and ray_ex.running() == {"lost-1": 0}
    key = agent.handle.sent[0][0]
    root, ns, nodes = ray_ex.root, ray_ex.namespace, ray_ex.node_dir
    ray_ex.close()
    ex2 = RayExecutor(root, address=ray_cluster.address, namespace=ns, node_dir=nodes)
    try:
        exits = ex2.adopt() or collect(ex2, 1, 30)  # the agent's answer may come after adopt's 2 s
        assert [(e.job, e.rank, e.started, e.returncode, e.ok) for e in exits] == [("lost-1", 0, False, None, False)]
        assert exits[0].reason == ("never started: its start did not reach the fairpod agent on node w1 before "
                                   "the control plane that sent it stopped"), exits[0].reason
        assert ex2.running() == {}
        handle = ex2._agents[ex2._by_name["w1"].node_id].handle
        wait_for(lambda: ray_driver.get(handle.sync.remote([(key, 0, 10)]), timeout=30)["replicas"][key] is not None,
                 30, "the agent to be told to stop the replica")
        # the dead control plane's start arrives now: the agent does not run it
        ray_driver.get(handle.start.remote(key, job, job.replicas[0], "127.0.0.1", 0, str(tmp_path), ""), timeout=30)
        ans = ray_driver.get(handle.sync.remote([(key, 0, 100)]), timeout=30)["replicas"][key]
        assert ans["status"]["reason"] == "stopped before start" and ans["size"] == 0, ans  # no output: it never ran
        assert ex2.poll() == []  # once
    finally:
        ex2.close()


def test_an_agent_whose_node_died_before_it_was_placed_is_lost_not_an_error(ray_ex: RayExecutor, ray_driver: Any):
    """A node that dies while its agent is being placed leaves an agent Ray can never schedule: its calls raise
    Ray's ActorUnschedulableError, which is no RayActorError. That is the agent lost (a node fault), not an error
    out of the executor: at start-up it made ``fairpod up`` exit (found by the suite, a node of an earlier test
    dying as the server started)."""
    from fairpod.executors.ray.nodes import RayNode

    ghost = RayNode(name="ghost", node_id="ab" * 28, address="127.0.0.99", alive=True,
                    instance_type="ml.g5.12xlarge", gpus=0)
    agent = ray_ex._start_agent(ghost)  # pinned to a node id the cluster does not have
    ref = agent.sync_ref
    ready, _ = ray_driver.wait([ref], timeout=60)
    assert ready, "Ray did not answer for the unplaceable agent"
    assert ray_ex._agent_answer(agent, ref) is None
    assert agent.lost is not None and "died" in agent.lost and "not schedulable" in agent.lost, agent.lost


def _where() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def _slow(seconds: float) -> str:
    time.sleep(seconds)
    return "done"


def _fails() -> None:
    raise ValueError("the check failed")


def test_run_on_node_runs_a_task_on_that_node(ray_cluster: RayTestCluster, ray_ex: RayExecutor):
    for name in ("w1", "w4"):
        assert ray_ex.run_on_node(name, _where, timeout=30) == ray_cluster.nodes[name].node_id
    assert ray_ex.run_on_node("w2", _slow, 0.01, timeout=30) == "done"
    with pytest.raises(ValueError, match="the check failed"):
        ray_ex.run_on_node("w2", _fails, timeout=30)
    with pytest.raises(TimeoutError, match="_slow did not finish within 0.5 s on node w3"):
        ray_ex.run_on_node("w3", _slow, 30, timeout=0.5)
    with pytest.raises(ExecutorError, match="node nope is not in the Ray cluster"):
        ray_ex.run_on_node("nope", _where, timeout=5)


def test_nodes_join_and_leave_the_node_table(ray_cluster: RayTestCluster, ray_ex: RayExecutor):
    table = {n.name: n for n in ray_ex.cluster_nodes()}
    assert {"w1", "w2", "w3", "w4"} <= set(table) and "head" not in table  # the head names no instance type
    assert all(table[w].instance_type == "ml.g5.12xlarge" and table[w].gpus == 4 for w in ("w1", "w2"))
    t0 = time.monotonic()
    ray_cluster.add_nodes([("j1", "ml.g5.2xlarge", 1, True, 1)])  # the instance type as a node label
    try:  # j1 goes whatever happens: a node left in the session cluster fails every later test's check of 16 GPUs
        # (the agent is a Python worker Ray starts on j1: waited for while j1's processes work)
        node = wait_for(lambda: next((n for n in ray_ex.cluster_nodes() if n.name == "j1" and n.alive), None), 15,
                        "j1 to show (its agent started)", lambda: ray_cluster.cpu("j1"))
        assert node.alive and node.instance_type == "ml.g5.2xlarge" and node.gpus == 1
        joined = time.monotonic() - t0
        ray_cluster.kill_node("j1")
        t1 = time.monotonic()
        dead = wait_for(lambda: next((n for n in ray_ex.cluster_nodes() if n.name == "j1" and not n.alive), None),
                        15, "j1 to be dead")
        lost = time.monotonic() - t1
        assert dead.death and not dead.expected_death
        # the suite's own repair (tests/ray/conftest.py, before each test): a node GCS counts dead is started anew
        # by its name, address and arguments (j1 as it was: its instance type a label), once
        old_id = ray_cluster.nodes["j1"].node_id
        assert ray_cluster.heal(["j1"]) == ["j1"]
        assert ray_cluster.nodes["j1"].node_id != old_id and ray_cluster.ips["j1"] == dead.address
        wait_for(lambda: any(n.name == "j1" and n.alive for n in ray_ex.cluster_nodes()), 30, "j1 alive again")
        assert ray_cluster.heal(["j1"]) == []
    finally:
        if "j1" in ray_cluster.nodes:
            ray_cluster.stop_node("j1")
    print(f"join visible after {joined:.1f} s (node start included), loss after {lost:.1f} s")
    assert lost < 8


def test_the_test_cluster_listens_and_talks_on_loopback_only(ray_cluster: RayTestCluster, ray_driver):
    pids = ray_cluster.pids() | {os.getpid()}
    out = subprocess.run(["ss", "-tanp"], capture_output=True, text=True, check=True).stdout
    ours = [ln for ln in out.splitlines() if any(f"pid={p}," in ln for p in pids)]
    assert len(ours) > 10  # raylets, GCS, workers, this driver
    def loopback(addr: str) -> bool:
        host = addr.rsplit(":", 1)[0].strip("[]").removeprefix("::ffff:")
        return host.startswith("127.") or host == "::1"

    for ln in ours:
        fields = ln.split()
        local, peer = fields[3], fields[4]
        # bound to loopback, never to an external address. Exception: Ray (2.60) binds its gRPC servers (GCS,
        # raylets, the core worker of every worker and driver) to the wildcard when a node's address is not
        # 127.0.0.1, as each test node's is; every connection below still runs over loopback
        wildcard = local.rsplit(":", 1)[0] in ("*", "0.0.0.0", "[::]")
        assert loopback(local) or wildcard, ln
        if fields[0] != "LISTEN":
            assert loopback(peer), ln



def test_every_node_has_its_own_address(ray_cluster: RayTestCluster, ray_ex: RayExecutor):
    nodes = [n for n in ray_ex.cluster_nodes() if n.alive]
    assert len(nodes) >= 2
    addresses = [n.address for n in nodes]
    assert len(set(addresses)) == len(addresses) and "127.0.0.1" not in addresses
    assert all(ray_cluster.ips[n.name] == n.address for n in nodes)


def test_a_readiness_command_runs_on_the_replicas_node_by_its_supervisor(ray_ex: RayExecutor, tmp_path: Path):
    """A service's readiness command is run by each replica's supervisor on its node, in its sandbox, with its
    environment (RANK, its checkpoint directory): the node agent's sync carries the result, nothing runs here."""
    cmd = ["sh", "-c", 'touch "$FAIRPOD_CHECKPOINT_DIR/warm$RANK"; exec sleep 300']
    job = dataclasses.replace(launch("svc-1", cmd, ["w1", "w2"], tmp_path, gpus=1),
                              readiness=["sh", "-c", '[ "$RANK" = 1 ] && test -f "$FAIRPOD_CHECKPOINT_DIR/warm1"'])
    ray_ex.launch(job)
    wait_for(lambda: ray_ex.probed_ready("svc-1", 0) == {1}, 30, "rank 1's probe to pass on its node")
    wait_for(lambda: (tmp_path / "runs" / "svc-1" / "0" / "0" / "ready.json").exists(), 30, "rank 0's result")
    assert ray_ex.probed_ready("svc-1", 0) == {1}  # rank 0's probe fails (exit 1)
    ray_ex.stop("svc-1", 0, 0.0)
    collect(ray_ex, 2)
