"""A KubeRay RayService as a fairpod service, end to end on one real server: ``fairpod apply -f`` by a member of team
smith; a real Ray cluster in its two replicas (the head on rank 0, a worker of the worker group on rank 1); Ray
Serve deploys the file's application (its code in a local ``working_dir``, its ``env_vars``, two replicas with
``user_config`` and ``ray_actor_options``) once the head is up; the service is ready when Serve reports it
RUNNING, and a request to its route through the service's address gets the deployment's answer. Deleting it
stops every process of its replicas (Ray's and Serve's, found by their environment, checked by PID).

Stand-in, named: the sample's code is a GitHub zip archive (fruit.deployment_graph), which fairpod refuses as a
URL; here a small application of this test in a local directory takes its place.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ..conftest import Server, running, wait_for

SPEC = """
cluster:
  name: serve
  instance_groups:
    - {name: g, instance_type: unit1, count: 2}
instance_types:
  - {name: unit1, accelerators: 0, vcpu: 2, memory_gib: 4}
teams:
  - {name: smith, sharing: {strategy: LendAndBorrow, borrow_limit: 100}, quota: [{instance_type: unit1, count: 2}]}
"""

APP = '''
import os

from ray import serve
from starlette.requests import Request


@serve.deployment
class Greeter:
    def __init__(self):
        self.greeting = "(no user_config)"

    def reconfigure(self, config):
        self.greeting = config["greeting"]

    async def __call__(self, request: Request) -> str:
        who = (await request.body()).decode() or "world"
        return f"{self.greeting} {who}{os.environ.get('PUNCTUATION', '?')}"


app = Greeter.bind()
'''

# the form of ray-project/kuberay ray-operator/config/samples/ray-service.sample.yaml (written for fairpod's
# tests): its working_dir a local directory in place of the sample's GitHub archive, the head with num-cpus 0 (as
# ray-service.high-availability.yaml) so that Serve's replicas run on the worker
MANIFEST = """
apiVersion: ray.io/v1
kind: RayService
metadata:
  name: greeter
  namespace: hyperpod-ns-smith
spec:
  serviceUnhealthySecondThreshold: 900
  serveConfigV2: |
    applications:
      - name: greet_app
        import_path: greet:app
        route_prefix: /greet
        runtime_env:
          working_dir: greetapp
          env_vars: {PUNCTUATION: "!"}
        deployments:
          - name: Greeter
            num_replicas: 2
            user_config: {greeting: hello}
            ray_actor_options: {num_cpus: 0.1}
  rayClusterConfig:
    rayVersion: "2.52.0"
    headGroupSpec:
      rayStartParams: {num-cpus: "0"}
      template:
        spec:
          containers:
          - name: ray-head
            resources: {limits: {cpu: "1", memory: 2Gi}}
    workerGroupSpecs:
    - replicas: 1
      groupName: small-group
      rayStartParams: {}
      template:
        spec:
          containers:
          - name: ray-worker
            resources: {limits: {cpu: "1", memory: 2Gi}}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from running(tmp_path_factory.mktemp("rayservice"), SPEC)


def _pids_of(key: str) -> dict[int, str]:
    """The processes whose environment names the job ``key`` (its replicas' and everything they started:
    Ray's GCS, raylets, workers, Serve's controller, proxy and replicas), with their start times."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if f"FAIRPOD_JOB={key}".encode() in (d / "environ").read_bytes().split(b"\0"):
                out[int(d.name)] = (d / "stat").read_text().rsplit(")", 1)[1].split()[19]
        except OSError:
            continue
    return out


def _alive(pid: int, start: str) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19] == start
    except OSError:
        return False


@pytest.mark.timeout(420)  # a Ray cluster of two replicas, Serve's controller, proxy and replicas started on them
def test_a_rayservice_serves_its_route_through_the_service_address_and_delete_stops_it(server: Server,
                                                                                      tmp_path: Path):
    (tmp_path / "greetapp").mkdir()
    (tmp_path / "greetapp" / "greet.py").write_text(APP)
    (tmp_path / "greeter.yaml").write_text(MANIFEST)
    mo = server.cli("user", "create", "mo", "--team", "smith").stdout.split("token (shown once): ")[1].strip()
    r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "apply", "-f", "greeter.yaml"], cwd=tmp_path,
                       env={**server.env, "FAIRPOD_TOKEN": mo}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "rayservice.ray.io/greeter created" in r.stdout, r.stdout + r.stderr
    assert "spec.serviceUnhealthySecondThreshold: not used" in r.stderr  # one warning for what has no meaning here
    job = server.job("greeter")
    assert job["kind"] == "service" and job["team"] == "smith" and job["nodes"] == 2
    svc = wait_for(lambda: (v := server.api("GET", "/services/greeter").json())["ready_replicas"] >= 1 and v, 300,
                   "Serve to report greet_app RUNNING on the head", server.activity)
    assert [e["rank"] for e in svc["endpoints"]] == [0]  # the head's Serve proxy; the worker runs Serve's replicas
    answer = httpx.post(f"{svc['address']}/greet", content=b"mo", timeout=30)
    assert answer.status_code == 200 and answer.text == "hello mo!", answer.text
    log = (server.home / "runs" / f"greeter-{job['id']}" / "0" / "0" / "output.log").read_text()
    assert "fairpod serve: ready: greet_app RUNNING" in log, log[-3000:]
    pids = _pids_of(f"greeter-{job['id']}")
    assert len(pids) >= 6, pids  # two launchers, the Serve driver, Ray's GCS and raylets, Serve's actors at least
    server.cli("delete-service", "greeter", token=mo)
    server.wait_state("greeter", "Cancelled", timeout=60)
    wait_for(lambda: not [p for p, t in pids.items() if _alive(p, t)], 60, "every process of the service to end")
    assert not _pids_of(f"greeter-{job['id']}") and os.path.isdir(tmp_path / "greetapp")


def test_a_rayservice_whose_code_is_the_servers_own_directory_is_refused_in_one_line(server: Server,
                                                                                    tmp_path: Path):
    """Attack: the application's working_dir names fairpod's state directory (its database, its tokens): the
    service's working directory is that directory, refused at submit by the host-path rules; nothing is created."""
    (tmp_path / "steal.yaml").write_text(MANIFEST.replace("working_dir: greetapp", f"working_dir: {server.home}")
                                         .replace("name: greeter", "name: steal"))
    r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "apply", "-f", "steal.yaml"], cwd=tmp_path,
                       env=server.env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("fairpod: error:")]
    assert f"workdir {server.home}" in line and "no job may reach" in line, r.stderr
    assert f"the applications' runtime_env working_dir: the service's working directory {server.home}" in r.stderr  # why workdir
    assert "steal" not in [j["name"] for j in server.api("GET", "/jobs").json()["jobs"]]
