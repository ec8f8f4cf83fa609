"""PyTorchJob ``elasticPolicy`` -> fairpod elastic jobs: the mapping as a table, what each replica's torchrun
sees, bad values refused in one line, and a live run (a real server and replica processes, no torch) that starts
at minReplicas when only that fits and grows when capacity frees."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import fairpod
from fairpod.formats.kube.manifest import ManifestError
from fairpod.formats.kube.pod import pod_env
from fairpod.formats.kube.pytorchjob import convert
from tests.server.conftest import Server, running, wait_for
from tests.server.core.test_elastic_live import SPEC as ELASTIC_SPEC


def manifest(elastic: dict[str, Any] | None, workers: int = 4, master: int = 0) -> dict[str, Any]:
    def replica(n: int) -> dict[str, Any]:
        return {"replicas": n, "template": {"spec": {
            "nodeSelector": {"node.kubernetes.io/instance-type": "unit1"},
            "containers": [{"name": "pytorch", "resources": {"limits": {"nvidia.com/gpu": 1}},
                            "command": ["sh", "-c", "true"]}]}}}
    specs = {"Worker": replica(workers)}
    if master:
        specs["Master"] = replica(master)
    spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
    if elastic is not None:
        spec["elasticPolicy"] = elastic
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "ddp", "namespace": "hyperpod-ns-smith"}, "spec": spec}


def size(body: dict[str, Any]) -> tuple[int, int | None, int | None]:
    return body["nodes"], body.get("min_nodes"), body.get("max_nodes")


# elasticPolicy, Worker replicas, Master replicas -> (nodes, min_nodes, max_nodes), a phrase of the note
TABLE = [
    ({"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 4}, 4, 0, (1, 1, 4), "elastic, fairpod starts it with 1"),
    ({"minReplicas": 2, "maxReplicas": 4}, 4, 0, (2, 2, 4), "PET_NNODES=2:4"),  # c10d is torchrun's default
    ({"minReplicas": 0, "maxReplicas": 8}, 3, 1, (1, 1, 4), "grows it up to 4"),  # Master counts; min >= 1
    ({"minReplicas": 1, "maxReplicas": 64}, 4, 0, (1, 1, 4), "up to 4"),  # never more than the manifest asks
    ({"minReplicas": 1, "maxReplicas": 3}, 4, 0, (1, 1, 3), "maxReplicas 3 is below the 4 replicas"),
    ({"minReplicas": 2, "maxReplicas": 2}, 4, 0, (2, None, None), "runs exactly 2 replicas"),
    ({"minReplicas": 4, "maxReplicas": 4}, 4, 0, (4, None, None), "minReplicas is not below the 4 replicas"),
    ({"minReplicas": 6, "maxReplicas": 8}, 4, 0, (4, None, None), "minReplicas is not below the 4 replicas"),
    ({"maxReplicas": 4}, 4, 0, (4, None, None), "no minReplicas"),
    ({"rdzvBackend": "etcd", "minReplicas": 1, "maxReplicas": 64}, 4, 0, (4, None, None),
     "the etcd rendezvous it names is not fairpod's"),
    ({"rdzvBackend": "etcd-v2", "minReplicas": 1, "maxReplicas": 4}, 4, 0, (4, None, None), "etcd-v2 rendezvous"),
    ({"rdzvBackend": "static", "minReplicas": 1, "maxReplicas": 4}, 4, 0, (4, None, None), "static rendezvous"),
    ({"rdzvBackend": "c10d", "maxRestarts": 3}, 4, 0, (4, None, None), None),
    (None, 4, 0, (4, None, None), None),
]


@pytest.mark.parametrize(("elastic", "workers", "master", "want", "note"), TABLE)
def test_elastic_policy_mapping(elastic: dict | None, workers: int, master: int, want: tuple, note: str | None):
    j = convert(manifest(elastic, workers, master), python="/py", cwd="/work")
    assert size(j.body) == want
    notes = "\n".join(j.notes)
    if note is None:
        assert "elasticPolicy" not in notes
    else:
        assert note in notes
        assert len([n for n in j.notes if "elasticPolicy" in n]) <= 2


@pytest.mark.parametrize(("elastic", "message"), [
    ({"minReplicas": 3, "maxReplicas": 2}, "spec.elasticPolicy: minReplicas 3 is more than maxReplicas 2"),
    ({"minReplicas": -1, "maxReplicas": 2}, "spec.elasticPolicy.minReplicas: -1 is not a whole number of at least 0"),
    ({"minReplicas": "two", "maxReplicas": 2}, "spec.elasticPolicy.minReplicas: 'two' is not a whole number"),
    ({"minReplicas": 1, "maxReplicas": 0}, "spec.elasticPolicy.maxReplicas: 0 is not a whole number of at least 1"),
    ({"minReplicas": 1.5, "maxReplicas": 2}, "spec.elasticPolicy.minReplicas: 1.5 is not a whole number"),
    ({"minReplicas": True, "maxReplicas": 2}, "spec.elasticPolicy.minReplicas: True is not a whole number"),
    ({"maxRestarts": "many"}, "spec.elasticPolicy.maxRestarts: 'many' is not a whole number"),
])
def test_bad_elastic_values_are_refused_in_one_line(elastic: dict, message: str):
    with pytest.raises(ManifestError) as e:
        convert(manifest(elastic), python="/py", cwd="/work")
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_fixed_nnodes_in_the_command_is_warned_about():
    doc = manifest({"minReplicas": 1, "maxReplicas": 4})
    doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"] = \
        ["torchrun", "--nnodes=4", "train.py"]
    j = convert(doc, python="/py", cwd="/work")
    assert any("the command's --nnodes=4 overrides PET_NNODES=1:4" in w for w in j.warnings)
    doc["spec"]["elasticPolicy"] = {"minReplicas": 4}
    assert not any("overrides PET_NNODES" in w for w in convert(doc, python="/py", cwd="/work").warnings)


def test_torchrun_sees_the_range_and_replica_0_hosts_the_rendezvous():
    base = {"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "4000",
            "FAIRPOD_RUN_ID": "7-0-1", "FAIRPOD_MIN_NODES": "1", "FAIRPOD_MAX_NODES": "4",
            "FAIRPOD_PYTORCHJOB": json.dumps({"elastic": True, "max_restarts": 5})}
    e = pod_env(base)
    assert e["PET_NNODES"] == "1:4" and e["PET_RDZV_CONF"] == "is_host=1" and e["PET_MAX_RESTARTS"] == "5"
    assert e["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1" and e["PET_RDZV_ENDPOINT"] == "127.0.0.1:4000"
    e = pod_env({**base, "RANK": "2", "FAIRPOD_PYTORCHJOB": json.dumps({"elastic": True, "rdzv_conf": "timeout=9"})})
    assert e["PET_NNODES"] == "1:4" and e["PET_RDZV_CONF"] == "timeout=9,is_host=0"
    e = pod_env({**base, "FAIRPOD_PYTORCHJOB": json.dumps({"elastic": True, "rdzv_conf": "is_host=0"})})
    assert e["PET_RDZV_CONF"] == "is_host=0"  # the manifest's own choice stays
    fixed = {k: v for k, v in base.items() if not k.startswith("FAIRPOD_M")}
    e = pod_env({**fixed, "WORLD_SIZE": "2"})  # a job of a fixed size: as before
    assert e["PET_NNODES"] == "2" and "PET_RDZV_CONF" not in e and "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in e


# -- live ----------------------------------------------------------------------------------------------------

SPEC = ELASTIC_SPEC  # four one-accelerator nodes; john and smith with two each

# each replica (a plain process, as its pod would start it) notes its rank and what torchrun would read
REPLICA = 'echo "start $RANK $PET_NNODES $PET_RDZV_ENDPOINT $PET_RDZV_CONF" >> {out}; exec sleep 300'


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, SPEC)


def starts(out: Path, n: int) -> list[list[str]]:
    return wait_for(lambda: out.exists() and len(got := [ln.split() for ln in out.read_text().splitlines()
                                                        if ln.startswith("start")]) >= n and got,
                    30, f"{n} replica starts in {out.name}")


def test_c10d_elastic_pytorchjob_starts_at_min_and_grows(live: Server, tmp_path: Path):
    out = tmp_path / "replicas.log"
    for name, team, n in (("smith-a", "smith", 2), ("john-x", "john", 1)):
        live.cli("start-job", "--name", name, "--team", team, "--node-count", str(n), "--grace-seconds", "1",
                 "--", "sleep", "300")
        live.wait_state(name, "Running")
    doc = manifest({"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 4, "maxRestarts": 10})
    doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"] = \
        ["sh", "-c", REPLICA.format(out=out)]
    # replicas inherit no PYTHONPATH: point the pod wrapper at the fairpod under test
    doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = \
        [{"name": "PYTHONPATH", "value": str(Path(fairpod.__file__).parent.parent)}]
    path = tmp_path / "ddp.yaml"
    path.write_text(yaml.safe_dump(doc))
    r = live.cli("apply", "-f", str(path), check=False)
    assert r.returncode == 0, r.stderr
    assert "elasticPolicy min/max replicas 1/4: elastic, fairpod starts it with 1 replicas" in r.stderr
    j = live.wait_state("ddp", "Running")
    assert (j["nodes"], j["min_nodes"], j["max_nodes"]) == (1, 1, 4)  # only one node is free
    (first,) = starts(out, 1)
    assert first[1:3] == ["0", "1:4"] and first[4] == "is_host=1"
    endpoint = first[3]

    live.cli("cancel-job", "smith-a")  # smith's other job ends: the PyTorchJob grows into its two nodes
    wait_for(lambda: live.job("ddp")["nodes"] == 3, 30, "the PyTorchJob to grow to 3 replicas")
    got = starts(out, 3)
    assert sorted(s[1] for s in got) == ["0", "1", "2"] and len(got) == 3  # replica 0 ran throughout
    assert all(s[2] == "1:4" and s[3] == endpoint and s[4] == "is_host=0" for s in got[1:])
    kinds = [e["kind"] for e in live.api("GET", "/jobs/ddp/events").json()["events"]]
    assert "JobGrown" in kinds and live.job("ddp")["restarts"] == 0
    for name in ("ddp", "john-x"):
        live.cli("cancel-job", name)
