"""'fairpod hyp …' (the HyperPod CLI v3 PyTorch job commands) end to end against a live 'fairpod up' server
with the seed cluster: create, list, describe, list-pods, get-logs, delete; unsupported flags as one line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from .conftest import Server, wait_for

TRAIN = """\
import os, sys, time
keys = ["RANK", "WORLD_SIZE", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE", "GREETING", "FAIRPOD_TEAM"]
print("replica " + " ".join(f"{k}={os.environ.get(k)}" for k in keys), "args", sys.argv[1:], flush=True)
time.sleep(float(os.environ.get("TRAIN_SECONDS", "60")))
"""


def hyp(server: Server, *args: str) -> subprocess.CompletedProcess:
    return server.cli("hyp", *args, check=False)


def one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode != 0 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fairpod: error: "), r.stderr
    return lines[0]


def test_hyp_pytorch_job_commands_on_a_live_server(server: Server, tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    r = hyp(server, "create", "hyp-pytorch-job", "--job-name", "hello", "--image", "123.dkr.ecr/train:1", "--on-host",
            "--queue-name", "hyperpod-ns-john-localqueue", "--namespace", "hyperpod-ns-john",
            "--priority", "training-priority", "--max-retry", "2", "--instance-type", "ml.g5.12xlarge",
            "--node-count", "2", "--accelerators", "2", "--tasks-per-node", "1",
            "--environment", '{"GREETING": "hi"}', "--pull-policy", "Always",
            "--command", f"[{sys.executable}, {script}]", "--args", "[--epochs, 3]")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("hyp-pytorch-job hello created in namespace hyperpod-ns-john: fairpod job ")
    assert "the image 123.dkr.ecr/train:1 is not used (--on-host): the command runs on the node" in r.stderr
    job = server.wait_state("hello", "Running")
    assert (job["team"], job["priority"], job["nodes"], job["accelerators_per_node"]) == ("john", "training", 2, 2)
    assert job["auto_resume"] is True and job["max_retry"] == 2

    r = hyp(server, "list", "hyp-pytorch-job", "-n", "hyperpod-ns-john")
    assert r.returncode == 0, r.stderr
    header, row = r.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "NAMESPACE", "STATUS", "AGE"]
    assert row.split()[:3] == ["hello", "hyperpod-ns-john", "Running"]
    assert hyp(server, "list", "hyp-pytorch-job", "-n", "hyperpod-ns-smith").stdout.strip() == "No jobs found."

    r = hyp(server, "describe", "hyp-pytorch-job", "--job-name", "hello")
    assert r.returncode == 0, r.stderr
    assert "Namespace:      hyperpod-ns-john" in r.stdout
    assert "'kueue.x-k8s.io/queue-name': 'hyperpod-ns-john-localqueue'" in r.stdout
    assert "'kueue.x-k8s.io/priority-class': 'training-priority'" in r.stdout
    assert f"Command:        {sys.executable} {script} --epochs 3" in r.stdout
    assert "Max retry:      2 (restarts so far: 0)" in r.stdout

    r = hyp(server, "list-pods", "hyp-pytorch-job", "--job-name", "hello", "-o", "json")
    pods = json.loads(r.stdout)
    assert [p["pod"] for p in pods] == ["hello-pod-0", "hello-pod-1"]
    assert {p["namespace"] for p in pods} == {"hyperpod-ns-john"} and len({p["node"] for p in pods}) == 2
    r = hyp(server, "list-pods", "hyp-pytorch-job", "--job-name", "hello")
    assert "hello-pod-1" in r.stdout and "POD NAME" in r.stdout

    def logs() -> str:
        r = hyp(server, "get-logs", "hyp-pytorch-job", "--job-name", "hello", "--pod-name", "hello-pod-1")
        assert r.returncode == 0, r.stderr
        # the whole line: under PYTHONUNBUFFERED=1 print writes its pieces one by one
        return r.stdout if re.search(r"replica RANK=1[^\n]*\n", r.stdout) else ""

    out = wait_for(logs, 30, "pod 1's output")
    assert out.startswith("Listing logs for pod: hello-pod-1\n")
    # what HyperPod's operator gives a torchrun command, and the job's own environment and arguments
    assert "replica RANK=1 WORLD_SIZE=2 PET_NNODES=2 PET_NODE_RANK=1 PET_NPROC_PER_NODE=1 GREETING=hi " \
           "FAIRPOD_TEAM=john args ['--epochs', '3']" in out

    r = hyp(server, "delete", "hyp-pytorch-job", "--job-name", "hello", "-n", "hyperpod-ns-john")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("hyp-pytorch-job hello deleted from namespace hyperpod-ns-john")
    server.wait_state("hello", "Cancelled")


def test_hyp_refuses_what_fairpod_cannot_do_in_one_line(server: Server, tmp_path: Path):
    base = ["create", "hyp-pytorch-job", "--job-name", "nope", "--queue-name", "hyperpod-ns-john-localqueue",
            "--command", "[true]"]
    for flag, value, why in [
        ("--volume", "name=d,type=pvc,mount_path=/d,claim_name=c", "fairpod has no persistent volume claims (c)"),
        ("--volume", "name=d,type=nfs,mount_path=/d,path=/d", "type nfs is not known"),
        ("--volume", "name=d,type=hostPath,mount_path=/d,path=/elsewhere", "a directory mounted elsewhere needs"),
    ]:
        line = one_error_line(hyp(server, *base, flag, value))
        assert line.startswith(f"fairpod: error: hyp create hyp-pytorch-job: {flag} ")
        assert why in line
    # a topology level the cluster spec does not have: refused by the server, in one line
    line = one_error_line(hyp(server, *base, "--required-topology", "topology.k8s.aws/ultraserver-id"))
    assert "no topology level 'ultraserver-id'" in line
    line = one_error_line(hyp(server, *base, "--accelerator-partition-type", "mig-1g.10gb",
                              "--accelerator-partition-count", "2"))
    assert "no instance group splits its GPUs into mig-1g.10gb" in line
    assert "unrecognized arguments: --bogus" in one_error_line(hyp(server, *base, "--bogus"))
    assert "which team?" in one_error_line(hyp(server, "create", "hyp-pytorch-job", "--job-name", "nope",
                                               "--command", "[true]"))
    assert "name different teams" in one_error_line(hyp(server, *base, "--namespace", "hyperpod-ns-smith"))
    assert "namespace 'default' is not a team's namespace" in one_error_line(
        hyp(server, "list", "hyp-pytorch-job", "-n", "default"))
    assert "the following arguments are required: --job-name" in one_error_line(
        hyp(server, "describe", "hyp-pytorch-job"))
    assert "invalid choice: 'hyp-job'" in one_error_line(hyp(server, "list", "hyp-job"))
    assert "required: KIND (the kinds fairpod knows: hyp-pytorch-job)" in one_error_line(hyp(server, "list"))
    # a --command or --args list that does not close (or open) is refused, never run
    line = one_error_line(hyp(server, *base[:-2], "--command", "[python, -c, print(1)"))
    assert "the closing ']' is missing" in line and "--command" in line
    assert "the opening '[' is missing" in one_error_line(hyp(server, *base, "--args", "--epochs, 3]"))
    assert "an empty item" in one_error_line(hyp(server, *base, "--args", "[--epochs,, 3]"))
    # nothing of the above was submitted
    assert server.api("GET", "/jobs").json()["jobs"] == []
    # a priority class the cluster does not have, a pod that is not the job's: the server's / one clear line
    assert "unknown priority class 'urgent'" in one_error_line(hyp(server, *base, "--priority", "urgent-priority"))
    assert "is not a pod of job x" in one_error_line(
        hyp(server, "get-logs", "hyp-pytorch-job", "--job-name", "x", "--pod-name", "y-pod-0"))
    assert "no job 'ghost'" in one_error_line(hyp(server, "describe", "hyp-pytorch-job", "--job-name", "ghost"))


def test_deep_health_check_passed_nodes_only_reaches_the_scheduler(server: Server):
    """The flag reaches the scheduler: a job that cannot be placed waits for healthy *deep-check-passed* nodes."""
    assert server.api("POST", "/nodes/workers-0/cordon").status_code == 200
    r = hyp(server, "create", "hyp-pytorch-job", "--job-name", "dhc", "--queue-name", "hyperpod-ns-smith-localqueue",
            "--deep-health-check-passed-nodes-only", "true", "--node-count", "4",
            "--label-selector", '{"sagemaker.amazonaws.com/node-health-status": "Schedulable"}',
            "--command", "[true]")
    assert r.returncode == 0, r.stderr
    job = server.job("dhc")
    assert job["state"] == "Pending" and "deep-check-passed" in job["reason"], job
