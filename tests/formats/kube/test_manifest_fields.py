"""The fields of Kubernetes manifests as people write them, read one by one: image names as Kubernetes resolves
them, hostPath/emptyDir volumes (others refused by name), restartPolicy/backoffLimit as retries, runPolicy's
deadline, batch Jobs and Pods, the kinds refused by name, and the scratch directories podman is given."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fairpod.formats.kube import batch
from fairpod.formats.kube.image import VolumeError, qualify, volumes
from fairpod.formats.kube.manifest import ManifestError
from fairpod.formats.kube.pytorchjob import convert
from fairpod.formats.kube.teams import Teams
from fairpod.model.jobs import JobSpec
from fairpod.sandbox.container import scratch_flags

TEAMS = Teams.of([{"name": "ml", "namespaces": ["default"], "local_queues": ["user-queue"]}])
POD = {"containers": [{"name": "pytorch", "image": "pytorch/pytorch:2.1", "command": ["python", "t.py"]}]}
JOB = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
       "metadata": {"name": "t", "namespace": "default"},
       "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "OnFailure",
                                                   "template": {"spec": POD}}}}}


def torch(**changes: Any) -> dict[str, Any]:
    d = copy.deepcopy(JOB)
    d["spec"].update(changes)
    return d


def test_image_names_resolve_as_kubernetes_does():
    assert qualify("pytorch/pytorch:2.1") == "docker.io/pytorch/pytorch:2.1"
    assert qualify("ubuntu") == "docker.io/library/ubuntu"
    assert qualify("busybox:1.36", "mirror.example.com") == "mirror.example.com/library/busybox:1.36"
    for ref in ("quay.io/x/y:1", "localhost/x:1", "registry:5000/x", "123.dkr.ecr.us-west-2.amazonaws.com/x:y",
                "docker.io/library/ubuntu"):
        assert qualify(ref) == ref
    body = convert(torch(), python="py", cwd="/w", teams=TEAMS).body
    assert body["image"] == "docker.io/pytorch/pytorch:2.1" and body["team"] == "ml"


def test_volumes_hostpath_and_emptydir_and_the_rest_refused_by_name():
    c = {"volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True, "subPath": "run1"},
                          {"name": "shm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/scratch"}]}
    spec = {"volumes": [{"name": "data", "hostPath": {"path": "/fsx/"}},
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                        {"name": "tmp", "emptyDir": {}}]}
    assert volumes(c, spec, "w") == (["/fsx/run1:/data:ro"], ["/dev/shm:1024", "/scratch"])
    spec["volumes"] += [{"name": "cm", "configMap": {"name": "code"}}, {"name": "pvc", "persistentVolumeClaim": {}}]
    c["volumeMounts"] += [{"name": "cm", "mountPath": "/code"}, {"name": "pvc", "mountPath": "/ckpt"}]
    with pytest.raises(VolumeError, match=r"volume cm \(configMap\) at /code: .*; volume pvc "
                                          r"\(persistentVolumeClaim\) at /ckpt"):
        volumes(c, spec, "w")
    with pytest.raises(VolumeError, match="no volume named 'nope'"):
        volumes({"volumeMounts": [{"name": "nope", "mountPath": "/x"}]}, {}, "w")
    assert scratch_flags(["/dev/shm:1024", "/scratch", "/s2:64"], 2048) == [
        "--shm-size", "1024m", "--tmpfs", "/scratch:rw,nosuid,nodev,mode=1777", "--tmpfs",
        "/s2:rw,nosuid,nodev,mode=1777,size=64m"]
    assert scratch_flags(["/dev/shm"], 2048) == ["--shm-size", "2048m"]
    for bad in ("relative", "/", "/a/../b", "/x:0", "/x:big"):
        with pytest.raises(ValueError, match="scratch"):
            JobSpec(name="j", team="t", command=["x"], image="i", scratch=[bad])
    with pytest.raises(ValueError, match="need an image"):
        JobSpec(name="j", team="t", command=["x"], scratch=["/s"])


def test_restart_policy_backoff_limit_and_deadline():
    b = convert(torch(runPolicy={"backoffLimit": 5, "activeDeadlineSeconds": 60}), python="py", cwd="/w",
                teams=TEAMS).body
    assert (b["auto_resume"], b["max_retry"], b["max_runtime_seconds"]) == (True, 5, 60.0)
    never = torch(runPolicy={"backoffLimit": 5})
    never["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "Never"
    b = convert(never, python="py", cwd="/w", teams=TEAMS).body
    assert (b["auto_resume"], b["max_retry"]) == (False, 0)
    with pytest.raises(ManifestError, match="runPolicy.suspend"):
        convert(torch(runPolicy={"suspend": True}), python="py", cwd="/w", teams=TEAMS)
    with pytest.raises(ManifestError, match="backoffLimit: -1 is not a whole number"):
        convert(torch(runPolicy={"backoffLimit": -1}), python="py", cwd="/w", teams=TEAMS)
    bad = torch()
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"
    with pytest.raises(ManifestError, match="restartPolicy: 'Sometimes'"):
        convert(bad, python="py", cwd="/w", teams=TEAMS)


def test_batch_jobs_pods_and_kinds_refused_by_name():
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"generateName": "sample-job-", "namespace": "default",
                        "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
           "spec": {"parallelism": 3, "completions": 3, "suspend": True, "backoffLimit": 1,
                    "template": {"spec": {"restartPolicy": "OnFailure", "containers": [
                        {"name": "c", "image": "busybox", "args": ["echo", "hi"],
                         "resources": {"requests": {"cpu": 1, "memory": "200Mi"}}}]}}}}
    c = batch.convert(job, cwd="/w", teams=TEAMS)
    b = c.body
    assert (b["name"], b["team"], b["nodes"], b["vcpu"], b["image"], b["command"]) == (
        "sample-job", "ml", 3, 1.0, "docker.io/library/busybox", ["echo", "hi"])
    assert (b["auto_resume"], b["max_retry"], b["env"]["JOB_COMPLETION_INDEX"]) == (True, 1, "$(RANK)")
    job["spec"]["completions"] = 10
    with pytest.raises(ManifestError, match="completions 10 with parallelism 3"):
        batch.convert(job, cwd="/w", teams=TEAMS)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}
    assert batch.convert(pod, cwd="/w", teams=TEAMS).body["nodes"] == 1
    docs = [{"kind": k, "metadata": {"name": "x"}} for k in ("MPIJob", "RayCluster", "RayService", "Service")]
    assert [r.split(":")[0] for r in batch.refusals(docs)] == ["MPIJob x"]  # RayCluster, RayService: services


def test_a_job_naming_no_instance_type_gets_the_teams_types_that_fit_in_order():
    # (a GET /spec answer in part; dict(): not a spec of the Kueue round-trip corpus)
    spec = dict(cluster={"instance_groups": [{"instance_type": "ml.g5.8xlarge"}, {"instance_type": "ml.c5.4xlarge"},
                                             {"instance_type": "ml.g5.12xlarge"}]},
                teams=[{"name": "ml", "quota": [{"instance_type": "ml.g5.12xlarge"}]}])
    t = Teams.of(spec["teams"], spec=spec)
    assert t.instance_types("ml", {"accelerators": 1}) == "ml.g5.12xlarge,ml.g5.8xlarge"
    assert t.instance_types("ml", {"vcpu": 1}) == "ml.g5.12xlarge,ml.g5.8xlarge,ml.c5.4xlarge"
    assert t.instance_types("ml", {"accelerators": 8}) is None


def test_a_command_replaces_the_images_entrypoint_and_args_alone_keep_it():
    """Kubernetes: a container's ``command`` replaces the image's ENTRYPOINT, ``args`` alone are its arguments."""
    body = convert(torch(), python="py", cwd="/w", teams=TEAMS).body
    assert body["command"] == ["python", "t.py"] and body["replace_entrypoint"] is True
    JobSpec.model_validate(body)
    args_only = torch()
    args_only["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"] = {
        "containers": [{"name": "pytorch", "image": "pytorch/pytorch:2.1", "args": ["--epochs", "2"]}]}
    assert "replace_entrypoint" not in convert(args_only, python="py", cwd="/w", teams=TEAMS).body
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sh"], "args": ["-c", "true"]}]}}
    b = batch.convert(pod, cwd="/w", teams=TEAMS).body
    assert (b["command"], b["replace_entrypoint"]) == (["sh", "-c", "true"], True)
    with pytest.raises(ValueError, match="replace_entrypoint need an image"):
        JobSpec.model_validate({"name": "x", "team": "a", "instance_type": "ml.g5.8xlarge", "command": ["true"],
                                "replace_entrypoint": True})
