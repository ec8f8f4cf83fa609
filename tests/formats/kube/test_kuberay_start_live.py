"""KubeRay's ``rayStartParams`` and a RayJob's shutdown settings on a real ``fairpod up`` (one server for the
module): RayJobs written in the forms of KubeRay's samples, applied with ``fairpod apply -f``, each running on its
own Ray cluster started on this machine (the Ray installed here: the files name no image).

- ray-project/kuberay ray-operator/config/samples/ray-job.resources.yaml: the head's ``num-cpus: "0"`` and custom
  ``resources`` (in KubeRay's quoted JSON), the worker group's ``num-cpus``, reach each group's ``ray start``: the
  entrypoint's ``ray.nodes()`` shows them; ``dashboard-host`` and ``block`` are accepted with one warning;
- ray-project/kuberay ray-operator/config/samples/ray-job.shutdown.yaml: ``shutdownAfterJobFinishes: true`` with
  ``ttlSecondsAfterFinished`` keeps the cluster that long after the entrypoint ends, then the job succeeds;
- ray-project/kuberay ray-operator/config/samples/ray-job.pytorch-mnist.yaml: ``shutdownAfterJobFinishes: false``
  keeps the cluster until the job is stopped;
- parameters that would take a Ray node out of its replica's sandbox (``temp-dir``, ``node-ip-address``) and a TTL
  without a shutdown are refused by name, in one answer, and nothing is created.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import Server, running, wait_for

SPEC = """
cluster:
  name: kuberay
  instance_groups:
    - {name: g, instance_type: unit, count: 4}
instance_types:
  - {name: unit, accelerators: 0, vcpu: 2, memory_gib: 3}
teams:
  - {name: john, quota: [{instance_type: unit, count: 4}]}
"""

NODES = """
import json, ray
ray.init(logging_level="ERROR")
print("NODES", json.dumps([{"head": "node:__internal_head__" in n["Resources"],
                            **{k: v for k, v in n["Resources"].items() if not k.startswith(("node:", "memory",
                               "object_store_memory"))}} for n in ray.nodes() if n["Alive"]]), flush=True)
"""
DONE = 'import time\nprint("ENTRYPOINT DONE", repr(time.time()), flush=True)\n'

# the form of ray-project/kuberay ray-operator/config/samples/ray-job.resources.yaml (written for fairpod's tests)
RESOURCES = """
apiVersion: ray.io/v1
kind: RayJob
metadata: {name: rayjob-resources, namespace: hyperpod-ns-john}
spec:
  entrypoint: {python} {dir}/nodes.py
  rayClusterSpec:
    rayVersion: '2.60.0'
    headGroupSpec:
      rayStartParams:
        num-cpus: "0"
        dashboard-host: '0.0.0.0'
        resources: '"{\\"resource1\\": 2, \\"resource2\\": 3}"'
      template:
        spec:
          containers:
          - name: ray-head
            resources: {limits: {cpu: "1", memory: 2Gi}}
    workerGroupSpecs:
    - replicas: 1
      groupName: small-group
      rayStartParams:
        num-cpus: "3"
        block: 'true'
      template:
        spec:
          containers:
          - name: ray-worker
            resources: {limits: {cpu: "1", memory: 2Gi}}
"""

# the forms of ray-project/kuberay ray-operator/config/samples/ray-job.shutdown.yaml and
# ray-job.pytorch-mnist.yaml (shutdownAfterJobFinishes false), a head alone (written for fairpod's tests)
SHUTDOWN = """
apiVersion: ray.io/v1
kind: RayJob
metadata: {name: NAME, namespace: hyperpod-ns-john}
spec:
  entrypoint: {python} {dir}/done.py
  SETTINGS
  rayClusterSpec:
    rayVersion: '2.60.0'
    headGroupSpec:
      rayStartParams: {}
      template:
        spec:
          containers:
          - name: ray-head
            resources: {limits: {cpu: "1", memory: 2Gi}}
"""
TTL = 12

REFUSED = """
apiVersion: ray.io/v1
kind: RayJob
metadata: {name: rayjob-outside, namespace: hyperpod-ns-john}
spec:
  entrypoint: python -c 'print(1)'
  rayClusterSpec:
    headGroupSpec:
      rayStartParams: {temp-dir: /tmp/shared-ray}
      template: {spec: {containers: [{name: ray-head, resources: {limits: {cpu: "1"}}}]}}
    workerGroupSpecs:
    - replicas: 1
      rayStartParams: {node-ip-address: 0.0.0.0}
      template: {spec: {containers: [{name: ray-worker, resources: {limits: {cpu: "1"}}}]}}
---
apiVersion: ray.io/v1
kind: RayJob
metadata: {name: rayjob-ttl-only, namespace: hyperpod-ns-john}
spec:
  entrypoint: python -c 'print(1)'
  shutdownAfterJobFinishes: false
  ttlSecondsAfterFinished: 10
  rayClusterSpec:
    headGroupSpec:
      template: {spec: {containers: [{name: ray-head, resources: {limits: {cpu: "1"}}}]}}
"""


def _apply(server: Server, path: Path) -> subprocess.CompletedProcess:
    """``fairpod apply -f PATH`` from the file's directory, as a user applies from a project directory (a RayJob
    without an image runs there: the entrypoints' programs are in it)."""
    return subprocess.run([sys.executable, "-m", "fairpod.cli.main", "apply", "-f", str(path)], env=server.env,
                          cwd=path.parent, capture_output=True, text=True, timeout=60)


def _log(server: Server, name: str) -> str:
    return server.api("GET", f"/jobs/{server.job(name)['id']}/logs").text


def _succeeded(server: Server, name: str) -> dict[str, Any]:
    """The job once it has ended, which must be as Succeeded (its log said otherwise)."""
    try:  # bounded below the tests' own timeout, so that a stall's failure shows where the job was
        job = wait_for(lambda: (j := server.job(name))["state"] not in ("Pending", "Running") and j, 300,
                       f"{name} to end", server.activity, limit=840)
    except AssertionError as e:
        raise AssertionError(f"{e}\n" + "\n".join(f"--- {k} ---\n{v}"
                                                   for k, v in server.replica_logs(name, 4000).items())) from None
    assert job["state"] == "Succeeded", _log(server, name)[-3000:]
    return job


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, Any]]]:
    """ONE server; the three RayJobs applied at once (the ones that run), what apply said for each."""
    tmp = tmp_path_factory.mktemp("kuberay")
    tmp.chmod(0o755)  # the team's user runs the entrypoints from here
    for name, text in (("nodes.py", NODES), ("done.py", DONE)):
        (tmp / name).write_text(text)
        (tmp / name).chmod(0o644)
    files = {"rayjob-resources": RESOURCES,
             "rayjob-ttl": SHUTDOWN.replace("NAME", "rayjob-ttl").replace(
                 "SETTINGS", f"shutdownAfterJobFinishes: true\n  ttlSecondsAfterFinished: {TTL}"),
             "rayjob-keep": SHUTDOWN.replace("NAME", "rayjob-keep").replace("SETTINGS", "shutdownAfterJobFinishes: false")}
    gen = running(tmp, SPEC)
    server = next(gen)
    try:
        said = {}
        for name, text in files.items():
            (tmp / f"{name}.yaml").write_text(text.replace("{python}", sys.executable).replace("{dir}", str(tmp)))
            said[name] = _apply(server, tmp / f"{name}.yaml")
        yield server, said
    finally:
        gen.close()


# Ray clusters started as replicas; each wait is on the processes' progress (a stall of 300 s fails). The cap is
# for a suite at its busiest: a load average of 35 on the 2 cores once took the head's start 7 minutes (its `ray
# start` 2 min, its check that the node is alive 5 min) while the job made progress all along
@pytest.mark.timeout(900)
def test_each_groups_ray_start_params_reach_its_ray_nodes(applied: tuple[Server, dict[str, Any]]):
    server, said = applied
    r = said["rayjob-resources"]
    assert "rayjob.ray.io/rayjob-resources created" in r.stdout, r.stdout + r.stderr
    warned = [ln for ln in r.stderr.splitlines() if "rayStartParams" in ln]
    assert len(warned) == 1 and "headGroupSpec.rayStartParams.dashboard-host" in warned[0] \
        and "workerGroupSpecs[0].rayStartParams.block" in warned[0], r.stderr
    _succeeded(server, "rayjob-resources")
    line = next(ln for ln in _log(server, "rayjob-resources").splitlines() if ln.startswith("NODES "))
    nodes = json.loads(line.removeprefix("NODES "))
    (head,) = [n for n in nodes if n["head"]]
    (worker,) = [n for n in nodes if not n["head"]]
    assert head.get("CPU", 0) == 0 and head["resource1"] == 2 and head["resource2"] == 3, nodes
    assert worker["CPU"] == 3 and "resource1" not in worker, nodes


@pytest.mark.timeout(900)
def test_ttl_seconds_after_finished_keeps_the_ray_cluster_then_the_job_succeeds(
        applied: tuple[Server, dict[str, Any]]):
    server, said = applied
    assert f"ttlSecondsAfterFinished {TTL}" in said["rayjob-ttl"].stdout + said["rayjob-ttl"].stderr
    done = _succeeded(server, "rayjob-ttl")
    log = _log(server, "rayjob-ttl")
    ended = float(next(ln for ln in log.splitlines() if ln.startswith("ENTRYPOINT DONE")).split()[2])
    assert f"stays {TTL} s" in log, log[-2000:]
    assert done["finished_at"] - ended >= TTL, (done["finished_at"], ended)


@pytest.mark.timeout(600)
def test_shutdown_after_job_finishes_false_keeps_the_ray_cluster_until_stopped(
        applied: tuple[Server, dict[str, Any]]):
    server, _ = applied
    wait_for(lambda: "stays until the job is stopped" in _log(server, "rayjob-keep")
             or server.job("rayjob-keep")["state"] not in ("Pending", "Running"), 300,
             "the entrypoint to end and its Ray cluster to stay", server.activity)
    assert "ENTRYPOINT DONE" in _log(server, "rayjob-keep")
    assert server.job("rayjob-keep")["state"] == "Running", _log(server, "rayjob-keep")[-2000:]
    assert "stays until the job is stopped" in _log(server, "rayjob-keep")
    server.cli("cancel-job", "rayjob-keep")
    server.wait_state("rayjob-keep", "Cancelled", timeout=60)


def test_params_that_leave_the_sandbox_are_refused_by_name_in_one_answer(applied: tuple[Server, dict[str, Any]],
                                                                          tmp_path: Path):
    server, _ = applied
    (tmp_path / "refused.yaml").write_text(REFUSED)
    r = _apply(server, tmp_path / "refused.yaml")
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("fairpod: error:"), r.stderr
    for what in ("RayJob rayjob-outside: spec.rayClusterSpec.headGroupSpec.rayStartParams.temp-dir",
                 "RayJob rayjob-outside: spec.rayClusterSpec.workerGroupSpecs[0].rayStartParams.node-ip-address",
                 "RayJob rayjob-ttl-only: spec.ttlSecondsAfterFinished 10"):
        assert what in r.stderr, r.stderr
    names = {j["name"] for j in server.api("GET", "/jobs?limit=100").json()["jobs"]}
    assert not names & {"rayjob-outside", "rayjob-ttl-only"}, names
