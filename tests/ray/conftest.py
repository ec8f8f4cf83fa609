"""Fixtures for the Ray tests: one real Ray cluster for the whole session (a CPU-only head and four nodes of
ml.g5.12xlarge with 4 fake GPUs each, all on 127.0.0.1), this test process as a Ray driver, and fairpod
servers that run their jobs on that cluster (``cluster.executor.kind: ray``), each in its own Ray namespace.

Between tests everything a test started in Ray must be gone: its server cancels what still runs, the fixture
checks that the namespace holds no actor but its node agents and no placement group, then (the server stopped)
kills the node agents and waits until all 16 GPUs are free (each agent holds its node's GPUs).
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairpod.executors import procs, state
from fairpod.executors.ray.agents import AGENT_PREFIX

from ..server.conftest import Server, wait_for
from .cluster import ITYPE, RayTestCluster

pytest.importorskip("ray")
os.environ["RAY_AUTH_MODE"] = "disabled"  # as the test cluster (see cluster.py); servers inherit it

WORKERS = ["w1", "w2", "w3", "w4"]
TOTAL_GPUS = 4 * len(WORKERS)
FINISHED = ("Succeeded", "Failed", "Cancelled")


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayTestCluster]:
    c = RayTestCluster(tmp_path_factory.mktemp("ray-cluster"))
    try:
        c.start_head()
        for w in WORKERS:  # one at a time: four raylets registering at once with GCS on a loaded machine (the
            c.add_nodes([(w, ITYPE, 4, False, 2)])  # suite's first minute) ran out Ray's own 30 s start wait
        yield c
    finally:
        c.shutdown()


@pytest.fixture(autouse=True)
def _whole_ray_cluster(request: pytest.FixtureRequest) -> None:
    """Before each test of the session cluster: a worker node Ray marked dead meanwhile (its raylet missed its health
    checks on a loaded machine; a test's own node losses restore theirs) is started anew, so that one lost node
    fails no test but the one it was lost in (in one suite run every later Ray test found 4 GPUs missing)."""
    if "ray_cluster" in request.fixturenames:
        request.getfixturevalue("ray_cluster").heal(WORKERS)


@pytest.fixture(scope="session")
def ray_driver(ray_cluster: RayTestCluster) -> Any:
    """This process, connected to the test cluster (to look at placement groups, actors and resources)."""
    from fairpod.executors.ray import connect

    connect(ray_cluster.address, namespace="fairpod-tests")
    import ray

    yield ray
    ray.shutdown()


def agents(ray: Any, namespace: str) -> dict[str, Any]:
    """The live node agents of a fairpod namespace, by Ray node id."""
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a["namespace"] == namespace and a["name"].startswith(AGENT_PREFIX)]
    return {n[len(AGENT_PREFIX):]: ray.get_actor(n, namespace=namespace) for n in names}


def agent_pid(ray: Any, namespace: str, node_id: str) -> int:
    return int(ray.get(agents(ray, namespace)[node_id].sync.remote([]), timeout=30)["pid"])


def ray_state(ray: Any, namespace: str) -> tuple[list[str], list[str]]:
    """(named actors other than node agents, live placement groups) of a fairpod namespace: what replicas
    would leave behind (the executor creates neither)."""
    from ray.util.placement_group import placement_group_table

    actors = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
              if a["namespace"] == namespace and not a["name"].startswith(AGENT_PREFIX)]
    pgs = [v["name"] for v in placement_group_table().values()
           if str(v.get("name", "")).startswith(f"fairpod:{namespace}:") and v.get("state") != "REMOVED"]
    return actors, pgs


def free_gpus(ray: Any) -> float:
    return float(ray.available_resources().get("GPU", 0.0))


def assert_clean(ray: Any, namespace: str, timeout: float = 30.0) -> None:
    """Nothing of ``namespace`` but its node agents is left in Ray."""
    wait_for(lambda: ray_state(ray, namespace) == ([], []), timeout, f"namespace {namespace} to be empty in Ray")


def remove_agents(ray: Any, namespace: str, node_dir: Path | None = None, timeout: float = 30.0) -> None:
    """Kill the node agents of ``namespace`` (once its control plane is gone) and, with ``node_dir``, every process
    recorded under it (``kill_recorded``, also when the wait fails), then wait until every GPU of the cluster is
    free again (each agent holds its node's GPUs): a failed test leaves nothing that fails the next one."""
    try:
        for handle in agents(ray, namespace).values():
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # noqa: BLE001 - gone meanwhile
                pass
    finally:
        if node_dir is not None:
            kill_recorded(node_dir)
    all_gpus_free(ray, timeout)


def all_gpus_free(ray: Any, timeout: float = 30.0) -> None:
    try:
        wait_for(lambda: free_gpus(ray) == TOTAL_GPUS, timeout, f"all {TOTAL_GPUS} GPUs to be free")
    except AssertionError as e:  # who holds them: the named actors left (an earlier test's agents, by namespace)
        held = sorted(f"{a['namespace']}/{a['name']}" for a in ray.util.list_named_actors(all_namespaces=True))
        raise AssertionError(f"{e}; named actors in Ray: {', '.join(held) or 'none'}") from None


def kill_recorded(node_dir: Path) -> None:
    """SIGKILL every supervisor and command recorded under a Ray executor's node dir (left-overs of a failure)."""
    for f in node_dir.glob("**/*.pid"):
        rec = state.read_pid(f)
        if rec is not None and procs.alive(*rec):
            procs.signal_group(rec[0], signal.SIGKILL) if f.name == state.CHILD_PID else None
            try:
                os.kill(rec[0], signal.SIGKILL)
            except ProcessLookupError:
                pass


class RayServer(Server):
    """A fairpod server whose executor is the test Ray cluster (set in its cluster spec)."""

    def __init__(self, tmp: Path, cluster: RayTestCluster, spec: dict[str, Any] | None = None) -> None:
        self.namespace = f"t-{uuid.uuid4().hex[:10]}"
        data = spec or seed_spec_data()
        data.setdefault("cluster", {})["executor"] = {"kind": "ray", "ray_address": cluster.address,
                                                      "ray_namespace": self.namespace}
        path = tmp / "spec.yaml"
        path.write_text(yaml.safe_dump(data))
        super().__init__(tmp, path)
        self.node_dir = tmp / "ray-nodes"
        self.env["FAIRPOD_RAY_NODE_DIR"] = str(self.node_dir)
        self.cluster = cluster

    def nodes(self) -> dict[str, dict[str, Any]]:
        r = self.api("GET", "/nodes")
        assert r.status_code == 200, r.text
        return {n["name"]: n for n in r.json()["nodes"]}

    def jobs(self) -> list[dict[str, Any]]:
        r = self.api("GET", "/jobs")
        assert r.status_code == 200, r.text
        return list(r.json()["jobs"])

    def cancel_all(self, timeout: float = 40.0) -> None:
        for j in self.jobs():
            if j["state"] not in FINISHED:
                self.api("POST", f"/jobs/{j['id']}/cancel")
        wait_for(lambda: all(j["state"] in FINISHED for j in self.jobs()), timeout, "every job to finish")


def seed_spec_data() -> dict[str, Any]:
    """The seed cluster (4 x ml.g5.12xlarge, teams john and smith); with Ray its instance group is the
    capacity the quotas are checked against, the nodes themselves come from Ray."""
    from fairpod.model.spec import seed_spec

    return seed_spec().model_dump(mode="json", exclude_defaults=True)


@pytest.fixture
def ray_server(ray_cluster: RayTestCluster, ray_driver: Any, tmp_path: Path) -> Iterator[RayServer]:
    yield from serving(ray_cluster, ray_driver, tmp_path)


def serving(ray_cluster: RayTestCluster, ray_driver: Any, tmp_path: Path, spec: dict[str, Any] | None = None,
            before_start: Callable[[RayServer], None] | None = None) -> Iterator[RayServer]:
    """A started server on the test Ray cluster (``spec``: the seed's by default; ``before_start(server)`` sets
    its environment or arguments), for a fixture to yield from; after the test its jobs are cancelled, the
    cluster is checked clean, its agents and processes are gone."""
    all_gpus_free(ray_driver)  # the previous test gave every GPU back
    s = RayServer(tmp_path, ray_cluster, spec)
    if before_start is not None:
        before_start(s)
    s.start()
    try:
        yield s
        if s.proc is not None and s.proc.poll() is None:
            s.cancel_all()
        assert_clean(ray_driver, s.namespace)
    finally:
        s.kill(signal.SIGTERM)
        remove_agents(ray_driver, s.namespace, s.node_dir)
