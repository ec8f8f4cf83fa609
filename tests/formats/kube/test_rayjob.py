"""KubeRay RayJob manifests: the sample applied unchanged is refused field by field (one line each, nothing
submitted); a RayJob fairpod can honour becomes one gang of ``ray: true``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fairpod.formats.kube import ManifestError
from fairpod.formats.kube.rayjob import convert, convert_all
from fairpod.model.jobs import JobSpec

SAMPLE = Path(__file__).parent / "kuberay" / "ray-job.sample.yaml"

RUNNABLE = """
apiVersion: ray.io/v1
kind: RayJob
metadata:
  name: rl
  namespace: hyperpod-ns-john
spec:
  entrypoint: python train.py --epochs 2
  activeDeadlineSeconds: 3600
  rayClusterSpec:
    rayVersion: '2.9.0'
    headGroupSpec:
      rayStartParams: {}
      template:
        spec:
          containers:
            - name: ray-head
              resources: {limits: {cpu: "4", memory: 16Gi, nvidia.com/gpu: 1}}
    workerGroupSpecs:
      - replicas: 3
        minReplicas: 3
        maxReplicas: 3
        groupName: gpus
        rayStartParams: {}
        template:
          spec:
            containers:
              - name: ray-worker
                resources: {limits: {cpu: "4", memory: 16Gi, nvidia.com/gpu: 1}}
"""


def test_the_kuberay_sample_is_refused_one_field_per_line() -> None:
    docs = list(yaml.safe_load_all(SAMPLE.read_text()))
    with pytest.raises(ManifestError) as e:
        convert_all(docs, cwd="/w")
    lines = str(e.value).splitlines()
    assert all(ln.startswith("RayJob rayjob-sample: ") for ln in lines)
    fields = [ln.split(": ", 2)[1].split(" ")[0] if "which team" not in ln else "which team?" for ln in lines]
    assert fields == [
        "which team?",
        "spec.runtimeEnvYAML",
        "spec.rayClusterSpec.headGroupSpec.rayStartParams",
        "spec.rayClusterSpec.headGroupSpec.template.spec.volumes",
        "spec.rayClusterSpec.headGroupSpec.template.spec.containers[ray-head].image",
        "spec.rayClusterSpec.headGroupSpec.template.spec.containers[ray-head].volumeMounts",
        "spec.rayClusterSpec.workerGroupSpecs[0].maxReplicas",
        "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[ray-worker].image",
        "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[ray-worker].lifecycle",
    ], lines


def test_a_rayjob_fairpod_can_honour_is_one_gang_with_the_head_on_rank_0() -> None:
    c = convert(yaml.safe_load(RUNNABLE), cwd="/w")
    body = c.body
    assert body["ray"] is True and body["nodes"] == 4 and body["team"] == "john"
    assert body["command"] == ["python", "train.py", "--epochs", "2"] and body["max_runtime_seconds"] == 3600
    assert (body["accelerators"], body["vcpu"], body["memory_gib"]) == (1, 4, 16)
    assert any("rayVersion" in n for n in c.notes)
    JobSpec.model_validate(body)  # a valid job spec as it is


def test_groups_of_different_shapes_are_refused() -> None:
    doc = yaml.safe_load(RUNNABLE.replace('cpu: "4", memory: 16Gi, nvidia.com/gpu: 1}}\n    workerGroupSpecs',
                                          'cpu: "8", memory: 16Gi, nvidia.com/gpu: 1}}\n    workerGroupSpecs'))
    with pytest.raises(ManifestError, match="differ from the head's"):
        convert(doc, cwd="/w")


def test_fairpod_apply_prints_each_refusal_on_its_own_line_and_submits_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "FAIRPOD_HOME": str(tmp_path), "FAIRPOD_CONFIG": str(tmp_path / "config.json"),
           "FAIRPOD_URL": "http://127.0.0.1:9", "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "apply", "-f", str(SAMPLE)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    # no team line: the file names none, and the team is asked of the server only once the file is otherwise fine
    assert len(lines) == 8 and all(f"{SAMPLE}: RayJob rayjob-sample: " in ln for ln in lines), r.stderr
