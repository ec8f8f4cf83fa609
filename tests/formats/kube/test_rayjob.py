"""KubeRay RayJob manifests: a RayJob becomes one gang of ``ray: true`` in its image, with its runtime environment,
autoscaling bounds and volumes; what has no meaning here (the sample's ConfigMap volume) is refused by name, one
line each, nothing submitted. The live runs are in tests/formats/corpus/test_kube_corpus.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fairpod.formats.kube.manifest import ManifestError
from fairpod.formats.kube.rayjob import convert, convert_all
from fairpod.model.jobs import JobSpec

SAMPLE = Path(__file__).parent / "kuberay" / "rayjob-configmap.yaml"

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


def test_the_kuberay_sample_is_refused_only_for_what_has_no_meaning_here() -> None:
    """Our RayJob in the form of KubeRay's sample: its image, runtimeEnvYAML, rayStartParams and autoscaling bounds are read;
    only its ConfigMap volume (the code) and the missing team are refused, one line each."""
    docs = list(yaml.safe_load_all(SAMPLE.read_text()))
    with pytest.raises(ManifestError) as e:
        convert_all(docs, cwd="/w")
    lines = str(e.value).splitlines()
    assert all(ln.startswith("RayJob word-count: ") for ln in lines)
    assert len(lines) == 2 and "which team?" in lines[0], lines
    assert "containers[head]: volume app-code (configMap) at /home/ray/app: a ConfigMap is a " \
           "Kubernetes object" in lines[1], lines


def test_a_rayjob_without_an_image_runs_the_ray_of_the_nodes_with_the_head_on_rank_0() -> None:
    c = convert(yaml.safe_load(RUNNABLE), cwd="/w")
    body = c.body
    assert body["ray"] is True and body["nodes"] == 4 and body["team"] == "john"
    assert body["command"] == ["python", "train.py", "--epochs", "2"] and body["max_runtime_seconds"] == 3600
    assert (body["accelerators"], body["vcpu"], body["memory_gib"]) == (1, 4, 16)
    assert "image" not in body and body["workdir"] == "/w"
    assert any("rayVersion" in n for n in c.notes) and any("no container image" in n for n in c.notes)
    JobSpec.model_validate(body)  # a valid job spec as it is


def test_groups_of_different_shapes_get_the_largest_with_a_note() -> None:
    doc = yaml.safe_load(RUNNABLE.replace('cpu: "4", memory: 16Gi, nvidia.com/gpu: 1}}\n    workerGroupSpecs',
                                          'cpu: "8", memory: 16Gi, nvidia.com/gpu: 1}}\n    workerGroupSpecs'))
    c = convert(doc, cwd="/w")
    assert (c.body["vcpu"], c.body["memory_gib"], c.body["accelerators"]) == (8, 16, 1)
    assert any("the groups' resources differ" in n for n in c.notes)


IMAGED = """
apiVersion: ray.io/v1
kind: RayJob
metadata:
  name: rl
  namespace: hyperpod-ns-john
  labels: {kueue.x-k8s.io/priority-class: training-priority}
spec:
  entrypoint: python -c "import ray; ray.init()"
  shutdownAfterJobFinishes: true
  ttlSecondsAfterFinished: 10
  backoffLimit: 2
  runtimeEnvYAML: |
    pip: [requests==2.26.0]
    env_vars: {counter_name: test_counter}
    working_dir: WD
  rayClusterSpec:
    enableInTreeAutoscaling: true
    headGroupSpec:
      rayStartParams: {num-cpus: "0", dashboard-host: 0.0.0.0}
      template:
        spec:
          nodeSelector: {node.kubernetes.io/instance-type: ml.g5.12xlarge}
          containers:
          - name: ray-head
            image: rayproject/ray:2.46.0
            imagePullPolicy: IfNotPresent
            env: [{name: A, value: "1"}]
            resources: {limits: {cpu: "2", memory: 4Gi}}
            volumeMounts: [{name: data, mountPath: /data}, {name: shm, mountPath: /dev/shm}]
          volumes:
          - {name: data, hostPath: {path: /srv/data}}
          - {name: shm, emptyDir: {medium: Memory, sizeLimit: 2Gi}}
    workerGroupSpecs:
    - replicas: 1
      minReplicas: 1
      maxReplicas: 4
      groupName: g
      template:
        spec:
          containers:
          - name: ray-worker
            image: rayproject/ray:2.46.0
            resources: {limits: {cpu: "2", memory: 4Gi}}
"""


def test_a_rayjob_in_its_image_with_its_runtime_env_and_autoscaling_bounds(tmp_path: Path) -> None:
    c = convert(yaml.safe_load(IMAGED.replace("WD", str(tmp_path))), cwd="/w")
    b = c.body
    assert (b["image"], b["image_pull_policy"], b["instance_type"], b["priority"]) == (
        "docker.io/rayproject/ray:2.46.0", "IfNotPresent", "ml.g5.12xlarge", "training")
    assert (b["nodes"], b["min_nodes"], b["max_nodes"]) == (2, 2, 5)  # the autoscaler's bounds: elastic
    assert b["mounts"] == ["/srv/data:/data"] and b["scratch"] == ["/dev/shm:2048"]
    assert b["workdir"] == str(tmp_path)  # the local working_dir, bound into the image at its path
    assert b["env"]["counter_name"] == "test_counter" and b["env"]["A"] == "1"
    assert json.loads(b["env"]["FAIRPOD_RAY_RUNTIME_ENV"]) == {"pip": ["requests==2.26.0"]}  # for Ray itself
    assert (b["auto_resume"], b["max_retry"]) == (True, 2)
    said = "\n".join(c.notes)
    for words in ("ttlSecondsAfterFinished 10: the job's Ray cluster stays 10 s",
                  "enableInTreeAutoscaling: elastic, 2..5 replicas"):
        assert words in said, said
    # the head's num-cpus for its ray start (the worker group's 4 replicas: the autoscaler's maximum), its
    # dashboard-host warned about; the cluster stays the TTL after the entrypoint
    assert json.loads(b["env"]["FAIRPOD_RAY_START_PARAMS"]) == {"head": {"num-cpus": "0"}, "workers": [[4, {}]]}
    assert b["env"]["FAIRPOD_RAY_KEEP_SECONDS"] == "10"
    assert any("headGroupSpec.rayStartParams.dashboard-host: not used" in w for w in c.warnings), c.warnings
    JobSpec.model_validate(b)


def test_what_a_rayjob_in_an_image_cannot_have_is_refused_by_name() -> None:
    doc = yaml.safe_load(IMAGED.replace("WD", "/no/such/dir").replace(
        "            image: rayproject/ray:2.46.0\n            resources", "            image: other:1\n"
        "            resources").replace("  backoffLimit: 2", "  backoffLimit: 2\n  clusterSelector: {a: b}"))
    with pytest.raises(ManifestError) as e:
        convert(doc, cwd="/w")
    text = str(e.value)
    assert "spec.clusterSelector: fairpod starts a Ray cluster per job" in text
    assert "working_dir /no/such/dir: no such directory here" in text
    assert "one image for every Ray node of a job" in text and "other:1" in text


def test_the_entrypoint_runs_with_the_runtime_env_for_ray_only() -> None:
    """The launcher gives the entrypoint Ray's job config (what ray.init reads from a job submission); a bad one
    is one line, not a traceback."""
    from fairpod.executors.raycluster import job_config

    assert job_config({}) == {}
    got = job_config({"FAIRPOD_RAY_RUNTIME_ENV": '{"pip": ["x"]}'})
    assert json.loads(got["RAY_JOB_CONFIG_JSON_ENV_VAR"]) == {"runtime_env": {"pip": ["x"]}}
    with pytest.raises(SystemExit, match="FAIRPOD_RAY_RUNTIME_ENV is not JSON"):
        job_config({"FAIRPOD_RAY_RUNTIME_ENV": "{pip"})


def test_fairpod_apply_prints_each_refusal_on_its_own_line_and_submits_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "FAIRPOD_HOME": str(tmp_path), "FAIRPOD_CONFIG": str(tmp_path / "config.json"),
           "FAIRPOD_URL": "http://127.0.0.1:9", "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "apply", "-f", str(SAMPLE)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    # no team line: the file names none, and the team is asked of the server only once the file is otherwise fine
    assert len(lines) == 1 and "volume app-code (configMap)" in lines[0] and all(f"{SAMPLE}: RayJob word-count: " in ln for ln in lines), r.stderr
