"""KubeRay RayCluster manifests: a RayCluster becomes a fairpod service that is a Ray job (a standing Ray cluster:
head on rank 0, the workers on the others, each Ray node ready when it answers on its service port); its
autoscaling bounds are the service's min..max replicas; what has no meaning here is refused by name, one line each.
A RayService is no longer refused by its kind (tests/formats/kube/test_rayservice.py). The live run is in
tests/server/core/test_rayjobs_live.py."""

from __future__ import annotations

import pytest
import yaml

from fairpod.formats.kube import batch
from fairpod.formats.kube.manifest import ManifestError
from fairpod.formats.kube.raycluster import convert, convert_all
from fairpod.formats.kube.teams import Teams
from fairpod.model.jobs import JobSpec

# mirrors ray-project/kuberay ray-operator/config/samples/ray-cluster.sample.yaml (the same kinds, fields and forms;
# written for fairpod's tests): no namespace, requests below limits, the head's ports, a 1..5 worker group
SAMPLE_FORM = """
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: raycluster-kuberay
spec:
  rayVersion: "2.52.0"
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.52.0
          resources:
            limits: {cpu: "1", memory: "5Gi"}
            requests: {cpu: "1", memory: "2Gi"}
          ports:
          - {containerPort: 6379, name: gcs-server}
          - {containerPort: 8265, name: dashboard}
          - {containerPort: 10001, name: client}
  workerGroupSpecs:
  - replicas: 1
    minReplicas: 1
    maxReplicas: 5
    groupName: workergroup
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.52.0
          resources:
            limits: {cpu: "1", memory: "1Gi"}
            requests: {cpu: "1", memory: "1Gi"}
"""


def _doc(text: str = SAMPLE_FORM, **meta: object) -> dict:
    d = yaml.safe_load(text)
    d["metadata"].update(meta)
    return d


def test_the_sample_form_is_a_ray_service_in_its_image_with_the_head_on_rank_0() -> None:
    c = convert(_doc(), cwd="/w", teams=Teams(flag="john", check=False))
    b = c.body
    assert (b["ray"], b["service"], b["command"], b["team"]) == (True, {}, [], "john")
    assert b["nodes"] == 2 and "max_nodes" not in b  # without enableInTreeAutoscaling: replicas, as KubeRay
    assert b["image"] == "docker.io/rayproject/ray:2.52.0"
    assert (b["vcpu"], b["memory_gib"]) == (1, 5)  # the largest group's limits: one shape
    assert c.kind == ("RayCluster", "raycluster.ray.io")
    assert any("ports not used" in n for n in c.notes) and any("delete-service raycluster-kuberay" in n
                                                               for n in c.notes)
    spec = JobSpec.model_validate(b)
    assert spec.kind == "service" and spec.ray


def test_autoscaling_bounds_are_the_services_min_and_max_replicas() -> None:
    d = _doc(namespace="hyperpod-ns-john")
    d["spec"]["enableInTreeAutoscaling"] = True
    d["spec"]["autoscalerOptions"] = {"idleTimeoutSeconds": 60}
    b = convert(d, cwd="/w").body
    assert (b["nodes"], b["max_nodes"]) == (2, 6)  # the head and 1..5 workers
    assert JobSpec.model_validate(b).elastic


def test_on_host_runs_the_nodes_ray_and_the_team_comes_from_the_namespace() -> None:
    c = convert(_doc(namespace="hyperpod-ns-john"), cwd="/w", on_host=True)
    assert "image" not in c.body and c.body["workdir"] == "/w" and c.body["team"] == "john"
    assert any("not used (--on-host)" in w for w in c.warnings)


def test_what_has_no_meaning_here_is_refused_by_name_one_line_each() -> None:
    d = _doc()
    d["spec"].update(suspend=True, gcsFaultToleranceOptions={"redisAddress": "redis:6379"}, bogus=1)
    d["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"] = "rayproject/ray:2.9.0"
    with pytest.raises(ManifestError) as e:
        convert_all([d], cwd="/w")
    lines = str(e.value).splitlines()
    assert all(ln.startswith("RayCluster raycluster-kuberay: ") for ln in lines), lines
    text = str(e.value)
    for part in ("which team?", "spec.bogus: not known", "spec.suspend: true", "spec.gcsFaultToleranceOptions",
                 "spec.workerGroupSpecs[0].template.spec.containers[ray-worker].image", "one image"):
        assert part in text, (part, text)
    assert "rayClusterSpec" not in text  # a RayCluster's own field names


def test_neither_a_raycluster_nor_a_rayservice_is_refused_by_its_kind() -> None:
    assert batch.refusals([_doc(), {"kind": "RayService", "metadata": {"name": "rayservice-sample"}}]) == []
