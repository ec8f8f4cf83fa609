"""Gang readiness and restarts in place on the Ray executor (docs/resilience.md): a replica counts as started
only once its process runs on its Ray node, and a failed replica is started again by its own node's agent while
the other replica keeps running."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fairpod.executors import ExecutorError, JobLaunch, ReplicaLaunch, procs
from fairpod.executors.ray import RayExecutor

from ..server.conftest import wait_for
from .cluster import RayTestCluster
from .conftest import (
    RayServer,
    agent_pid,
    agents,
    all_gpus_free,
    assert_clean,
    remove_agents,
    seed_spec_data,
    serving,
)

# Records its PID and Ray node, counts its runs, rank 1 fails while told to, then waits (at most 60 s) for the
# test's "done", writing how many restarts in place its attempt has had (fairpod.sdk.peer_restarts).
REPLICA = """
import os, sys, time, pathlib
from fairpod import sdk
d, crashes = pathlib.Path(sys.argv[1]), int(sys.argv[2])
r = sdk.rank()
(d / f"pid-{r}-{os.getpid()}").write_text(os.environ["FAIRPOD_RAY_NODE_ID"] + " " + os.environ["MASTER_PORT"])
n = d / f"runs-{r}"
k = int(n.read_text()) if n.exists() else 0
n.write_text(str(k + 1))
if r == 1 and k < crashes:
    print(f"rank 1 run {k}: crashing", flush=True)
    sys.exit(3)
print(f"rank {r} up (replica restarts {sdk.replica_restarts()})", flush=True)
for _ in range(300):
    (d / f"gen-{r}").write_text(str(sdk.peer_restarts()))
    if (d / "done").exists():
        break
    time.sleep(0.2)
"""


@pytest.fixture
def srv(ray_cluster: RayTestCluster, ray_driver: Any, tmp_path: Path) -> Iterator[RayServer]:
    """A server on the test Ray cluster with a short readiness backoff (2 s)."""
    data = seed_spec_data()
    data["policy"]["ready_backoff_base_seconds"] = 2
    yield from serving(ray_cluster, ray_driver, tmp_path, data)


def job(tmp: Path, name: str, crashes: int = 0, **extra: object) -> dict[str, Any]:
    (tmp / name).mkdir()
    script = tmp / "replica.py"
    script.write_text(REPLICA)
    return {"name": name, "team": "john", "nodes": 2, "termination_grace_seconds": 1,
            "command": [sys.executable, str(script), str(tmp / name), str(crashes)], **extra}


def kinds(s: RayServer, name: str, *wanted: str) -> list[dict[str, Any]]:
    r = s.api("GET", f"/jobs/{name}/events")
    assert r.status_code == 200, r.text
    return [e for e in r.json()["events"] if e["kind"] in wanted]


def runs(d: Path, rank: int) -> list[str]:
    """What each run of ``rank`` wrote: its Ray node id and MASTER_PORT."""
    return [p.read_text() for p in sorted(d.glob(f"pid-{rank}-*"))]


def fork_servers(ray: Any, namespace: str) -> list[tuple[int, int | None]]:
    """(pid, start time) of the fork server of every node agent of ``namespace`` (a child of the agent)."""
    out = []
    for node_id in agents(ray, namespace):
        parent = agent_pid(ray, namespace, node_id)
        for pid in procs.descendants(parent):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == parent and b"forkserver" in cmd:
                out.append((pid, procs.start_time(pid)))
    return out


def test_a_replica_not_started_on_its_ray_node_in_time_is_requeued(srv: RayServer, ray_driver: Any,
                                                                    tmp_path: Path) -> None:
    s, warm = srv, tmp_path / "warm"
    wait = [sys.executable, "-c", f"import os, time\nfor _ in range(600):\n    if os.path.exists({str(warm)!r}):\n"
            "        break\n    time.sleep(0.1)"]
    s.submit(name="warm", team="john", nodes=3, command=wait)  # one replica on each node: each agent starts
    s.submit(name="warm1", team="smith", command=wait)  # its fork server
    frozen = wait_for(lambda: len(f := fork_servers(ray_driver, s.namespace)) == 4 and f, 60, "4 fork servers")
    warm.touch()
    for name in ("warm", "warm1"):
        s.wait_state(name, "Succeeded", 30)
    for pid, _ in frozen:  # the agents answer, the start calls reach them, but no supervisor can be forked
        os.kill(pid, signal.SIGSTOP)
    try:
        s.submit(**job(tmp_path, "slow", ready_timeout_seconds=2))
        (ev,) = wait_for(lambda: kinds(s, "slow", "JobNotReady"), 8, "slow's readiness timeout")
    finally:
        for pid, started in frozen:
            if procs.alive(pid, started):
                os.kill(pid, signal.SIGCONT)
    assert ev["message"].startswith("job slow: not ready: replicas 0, 1 of 2 not started within the readiness "
                                    "timeout of 2 s; its capacity is given back and it is requeued"), ev["message"]
    back = wait_for(lambda: (j := s.job("slow"))["state"] == "Pending" and j, 30, "slow back in its queue")
    assert back["reason"].startswith("requeued: not ready: replicas 0, 1 of 2 not started"), back["reason"]
    assert back["restarts"] == 0  # a readiness timeout spends no retry
    (tmp_path / "slow" / "done").touch()
    assert s.wait_state("slow", "Succeeded", 60)["restarts"] == 0  # launched again after the backoff


def test_a_replica_that_crashes_twice_is_restarted_in_place_on_its_ray_node(srv: RayServer, tmp_path: Path) -> None:
    s, d = srv, tmp_path / "inplace"
    s.submit(**job(tmp_path, "inplace", crashes=2, restarts_in_place=2, restart_eval_period_seconds=600))
    wait_for(lambda: (d / "runs-1").exists() and (d / "runs-1").read_text() == "3", 60, "rank 1's third run")
    wait_for(lambda: (d / "gen-0").exists() and (d / "gen-0").read_text() == "2", 30,
             "rank 0 to learn of both restarts (fairpod.sdk.peer_restarts)")
    got = s.job("inplace")
    ids = {w: n.node_id for w, n in s.cluster.nodes.items()}
    (first,) = runs(d, 0)  # never restarted
    assert first.split()[0] == ids[got["placement"][0]]
    ones = runs(d, 1)
    assert len(ones) == 3 and set(ones) == {f"{ids[got['placement'][1]]} {first.split()[1]}"}, ones  # its node,
    assert got["state"] == "Running" and got["restarts"] == 0  # the same rendezvous; no full restart
    restarting = kinds(s, "inplace", "ReplicaRestarting")
    assert [e["data"]["restart"] for e in restarting] == ["in-place", "in-place"]
    assert "replica 1 exited 3; restarting it in place (1 of 2 within 600 s" in restarting[0]["message"]
    assert len(kinds(s, "inplace", "ReplicaRestarted")) == 2 and not kinds(s, "inplace", "JobRestarting")
    log = wait_for(lambda: "rank 1 up (replica restarts 2)" in (t := s.cli("get-logs", "inplace", "--replica", "1")
                                                                .stdout) and t, 30, "the third run's output")
    assert "rank 1 run 0: crashing" in log and "rank 1 run 1: crashing" in log, log  # every run's, in one log
    (d / "done").touch()
    assert s.wait_state("inplace", "Succeeded", 30)["restarts"] == 0


# exits with $EXIT once the file $GATE exists (at most 60 s), after a line naming its run, node and rendezvous
ONE = ('echo "run ${FAIRPOD_REPLICA_RESTARTS:-0} node $FAIRPOD_RAY_NODE_ID port $MASTER_PORT"; '
       'for i in $(seq 600); do [ -e "$GATE" ] && break; sleep 0.1; done; exit "$EXIT"')


def test_the_executor_restarts_a_lone_replica_in_place_also_after_a_restart_of_the_control_plane(
        ray_cluster: RayTestCluster, ray_driver: Any, tmp_path: Path) -> None:
    all_gpus_free(ray_driver)
    ns, root, nodes = f"x-{uuid.uuid4().hex[:10]}", tmp_path / "runs", tmp_path / "nodes"
    gate = tmp_path / "gate"
    gate.touch()
    job = JobLaunch(job="lone", team="t", attempt=0, command=["sh", "-c", ONE], checkpoint_dir=str(tmp_path / "ck"),
                    grace_seconds=1.0, env={"EXIT": "3", "GATE": str(gate)},
                    replicas=(ReplicaLaunch(rank=0, node="w2", accelerators=(1, 2)),))
    ex = RayExecutor(root, address=ray_cluster.address, namespace=ns, node_dir=str(nodes))
    try:
        ex.launch(job)
        (first,) = wait_for(lambda: ex.poll(), 30, "the first run's exit")  # acknowledged: the attempt is forgotten
        assert first.returncode == 3 and ex.started_ranks("lone", 0) == {0} and not ex.running()
        gate.unlink()
        ex.restart_replicas(replace(job, env={**job.env, "EXIT": "0", "FAIRPOD_REPLICA_RESTARTS": "1"}))
        assert ex.running() == {"lone": 0}
        with pytest.raises(ExecutorError, match="have not ended"):
            ex.restart_replicas(job)
        log = root / "lone" / "0" / "0" / "output.log"
        wait_for(lambda: "run 1 node" in log.read_text(), 30, "the second run's first line")
        ex.close()  # the control plane goes; the restarted replica keeps running on its node
        ex = RayExecutor(root, address=ray_cluster.address, namespace=ns, node_dir=str(nodes))
        assert ex.adopt() == [] and ex.running() == {"lone": 0}
        gate.touch()
        (second,) = wait_for(lambda: ex.poll(), 30, "the second run's exit")
        assert second.returncode == 0 and second.rank == 0, second
        lines = [ln for ln in log.read_text().splitlines() if ln.startswith("run ")]
        node = ray_cluster.nodes["w2"].node_id
        assert [ln.split()[:4] for ln in lines] == [["run", "0", "node", node], ["run", "1", "node", node]], lines
        assert lines[0].split()[-1] == lines[1].split()[-1]  # the same MASTER_PORT
        assert_clean(ray_driver, ns)
    finally:
        ex.close()
        remove_agents(ray_driver, ns, nodes)
