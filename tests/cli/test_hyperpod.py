"""The ``hyperpod`` executable: the seeds' HyperPod CLI commands, verbatim, against a live server."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path

import pytest

from ..sandbox import images
from ..server.conftest import Server, running, wait_for

ROOT = Path(__file__).resolve().parents[2]
SPEC = """\
cluster:
  name: hp
  instance_groups:
    - {name: workers, instance_type: ml.g5.8xlarge, count: 2}
policy:
  priority_classes:
    - {name: fine-tuning, weight: 60}
    - {name: training, weight: 50}
teams:
  - name: ml-engineers
    quota: [{instance_type: ml.g5.8xlarge, count: 2}]
"""
# the HyperPod CLI's job config (its training_cfg / cluster shape; the seeds' "config.yaml")
CONFIG = """\
defaults:
  - override hydra/job_logging: stdout
hydra:
  run:
    dir: .
  output_subdir: null
training_cfg:
  entry_script: train.py
  script_args:
    - --epochs: 3
  run:
    name: hyperpod-cli-test
    nodes: 1
    ntasks_per_node: 1
cluster:
  cluster_type: k8s
  instance_type: ml.g5.8xlarge
  cluster_config:
    custom_labels:
      kueue.x-k8s.io/priority-class: fine-tuning-priority
    pullPolicy: IfNotPresent
    restartPolicy: OnFailure
    namespace: hyperpod-ns-ml-engineers
container: 123456789012.dkr.ecr.us-west-2.amazonaws.com/train:latest
env_vars:
  NCCL_DEBUG: INFO
"""
CONTAINER = "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:latest"
TRAIN = """\
import os, sys, time
print('train', sys.argv[1:], os.environ.get('NCCL_DEBUG'), os.environ['RANK'], flush=True)
if not sys.argv[1:]:
    time.sleep(60)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, SPEC)


def hyperpod(server: Server, line: str, cwd: Path) -> subprocess.CompletedProcess:
    """A seed's command line as typed: 'hyperpod …' runs the entry point pyproject installs as 'hyperpod'."""
    import shlex

    words = shlex.split(line.replace("\\\n", " "))  # a continued line, as the shell joins it
    assert words[0] == "hyperpod"
    return subprocess.run([sys.executable, "-m", "fairpod.cli.hyperpod", *words[1:]], env=server.env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_pyproject_installs_hyperpod_and_hyp():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, func in [("hyperpod", "main"), ("hyp", "hyp_main")]:
        module, _, attr = scripts[name].partition(":")
        assert (module, attr) == ("fairpod.cli.hyperpod", func)
        assert callable(getattr(import_module(module), attr))


def test_the_seeds_hyperpod_commands_verbatim(server: Server, tmp_path: Path):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "config.yaml").write_text(CONFIG)
    # seed 002, as typed: no script to run is one line, nothing submitted
    r = hyperpod(server, "hyperpod start-job --name smpv2-llama2 --namespace hyperpod-ns-ml-engineers", tmp_path)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "--entry-script" in r.stderr
    r = hyperpod(server, "hyperpod start-job --name smpv2-llama2 --namespace hyperpod-ns-ml-engineers "
                 "--entry-script train.py", tmp_path)
    assert r.returncode == 0 and r.stdout == "Successfully created job smpv2-llama2\n", r.stderr
    r = hyperpod(server, "hyperpod list-jobs --all-namespaces", tmp_path)
    jobs = json.loads(r.stdout)["jobs"]
    assert jobs[0]["Name"] == "smpv2-llama2" and jobs[0]["Namespace"] == "hyperpod-ns-ml-engineers"
    assert set(jobs[0]) == {"Name", "Namespace", "CreationTime", "State", "Priority"}
    # seed 004: the config file and auto-resume, verbatim; its container (tagged locally: no registry is
    # reachable here) holds the entry script and a python
    images.derived(CONTAINER, images.python(), {"/usr/local/bin/python": '#!/bin/sh\nexec python3 "$@"\n',
                                                "/train.py": TRAIN})
    r = hyperpod(server, "hyperpod start-job \\\n    --config-file ./config.yaml \\\n    --auto-resume true \\\n"
                 "    --max-retry 2", tmp_path)
    assert r.returncode == 0 and "Successfully created job hyperpod-cli-test" in r.stdout, r.stderr
    assert "image" not in r.stderr, r.stderr
    job = server.job("hyperpod-cli-test")
    assert (job["team"], job["priority"], job["instance_type"], job["auto_resume"], job["max_retry"]) == (
        "ml-engineers", "fine-tuning", "ml.g5.8xlarge", True, 2)
    server.wait_state("hyperpod-cli-test", "Succeeded", 60)
    # the HyperPod CLI's read verbs
    got = json.loads(hyperpod(server, "hyperpod get-job --job-name hyperpod-cli-test", tmp_path).stdout)
    assert got["State"] == "Succeeded" and got["Namespace"] == "hyperpod-ns-ml-engineers"
    pods = json.loads(hyperpod(server, "hyperpod list-pods --job-name hyperpod-cli-test", tmp_path).stdout)["pods"]
    assert [p["PodName"] for p in pods] == ["hyperpod-cli-test-pod-0"]
    r = hyperpod(server, "hyperpod get-log --job-name hyperpod-cli-test --pod hyperpod-cli-test-pod-0", tmp_path)
    assert "train ['--epochs', '3'] INFO 0" in r.stdout, r.stdout + r.stderr
    server.wait_state("smpv2-llama2", "Running")
    r = hyperpod(server, "hyperpod cancel-job --job-name smpv2-llama2 --namespace hyperpod-ns-ml-engineers",
                 tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("Successfully cancelled job smpv2-llama2")


def test_every_problem_of_a_config_file_is_in_one_answer(server: Server, tmp_path: Path):
    """The HyperPod CLI's template asked for one field per try before; now every field fairpod cannot honour is
    named in one answer, and nothing is submitted."""
    bad = CONFIG.replace("    pullPolicy", "    label_selector: {required: {team-rack: [a]}}\n"
                         "    persistent_volume_claims: [{claimName: fsx, mountPath: /fsx}]\n    pullPolicy")
    (tmp_path / "c.yaml").write_text(bad + "volumes: [{name: data}]\n")
    r = hyperpod(server, "hyperpod start-job --config-file c.yaml", tmp_path)
    assert r.returncode != 0 and r.stderr.startswith("hyperpod: error: c.yaml: fairpod cannot run this job as the "
                                                     "file asks (3 problems):"), r.stderr
    for words in ("volumes: not a field", "persistent_volume_claims: fairpod has no volume claims",
                  "label_selector.required team-rack: a: fairpod places by instance type"):
        assert words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert server.api("GET", "/jobs").json()["jobs"] == []


def test_the_templates_other_keys_are_mapped(server: Server, tmp_path: Path):
    """base_results_dir: a per-job directory with job.json; custom labels: the job's labels; volumes: mounts;
    ntasks_per_node: torchrun's processes per node; service accounts and preferred labels: a warning each."""
    (tmp_path / "train.py").write_text(TRAIN)
    cfg = CONFIG.replace("    ntasks_per_node: 1", "    ntasks_per_node: 4").replace(
        "      kueue.x-k8s.io/priority-class: fine-tuning-priority",
        "      kueue.x-k8s.io/priority-class: fine-tuning-priority\n      project: llama").replace(
        "    pullPolicy", f"    volumes: [{{volumeName: d, hostPath: {tmp_path}/data, mountPath: /data}}]\n"
        "    service_account_name: trainer\n    label_selector: {preferred: {sagemaker.amazonaws.com/"
        "deep-health-check-status: [Passed]}, weights: [100]}\n    pullPolicy")
    (tmp_path / "c.yaml").write_text(cfg + "base_results_dir: ./results\n")
    r = hyperpod(server, "hyperpod start-job --config-file c.yaml --on-host", tmp_path)
    assert r.returncode != 0 and "without the image (--on-host) the job sees the node's own paths" in r.stderr
    r = hyperpod(server, "hyperpod start-job --config-file c.yaml", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "service_account_name trainer: Kubernetes only" in r.stderr and "a preference fairpod does not" in r.stderr
    job = server.job("hyperpod-cli-test")
    assert job["labels"] == {"project": "llama"} and job["priority"] == "fine-tuning"
    assert f"{tmp_path}/data:/data" in job["mounts"] and job["env"]["PET_NPROC_PER_NODE"] == "4"
    results = tmp_path / "results" / "hyperpod-cli-test"
    assert json.loads((results / "job.json").read_text())["id"] == job["id"]
    assert job["env"]["RESULTS_DIR"] == str(results) and f"{results}:{results}" in job["mounts"]


def test_job_name_flag_works_on_every_fairpod_job_verb(server: Server, tmp_path: Path):
    server.cli("start-job", "--job-name", "jn", "--team", "ml-engineers", "--", "sh", "-c", "echo out; sleep 60")
    server.wait_state("jn", "Running")
    assert "Name:            jn" in server.cli("get-job", "--job-name", "jn").stdout
    assert "REPLICA" in server.cli("list-pods", "--job-name", "jn").stdout
    wait_for(lambda: "out" in server.cli("get-logs", "--job-name", "jn").stdout, 20, "the job's output")
    r = server.cli("get-job", "other", "--job-name", "jn", check=False)
    assert r.returncode == 1 and "name different jobs" in r.stderr
    r = server.cli("cancel-job", check=False)
    assert r.returncode == 1 and "which job?" in r.stderr
    server.cli("cancel-job", "--job-name", "jn")
    server.wait_state("jn", "Cancelled")
