"""Reading the formats users already have, without a server: #SBATCH directives, host lists, srun's options
and its torchrun rewrite, and PyTorchJob manifests."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml

from fairpod.formats.kube.manifest import ManifestError, quantity
from fairpod.formats.kube.pod import pod_env, resolve
from fairpod.formats.kube.pytorchjob import convert, convert_all
from fairpod.formats.slurm.hostlist import HostlistError, compress, expand
from fairpod.formats.slurm.runner import expand_pattern
from fairpod.formats.slurm.sbatch import BatchError, Setting, exported_env, job_name, read_script, to_job
from fairpod.formats.slurm.srun import Options, SrunError, layout, parse, rewrite_torchrun

SEED = Path(__file__).parent / "seed"


def job_of(text: str, *extra: Setting, env: dict[str, str] | None = None) -> tuple[dict, list[str], list[str]]:
    bs = read_script("job.sbatch", text)
    bs.settings.extend(extra)
    body, notes = to_job(bs, ["a1"], cwd="/work", environ=env or {"PATH": "/bin"}, python="/py")
    return body, notes, bs.warnings


def test_the_seed_script_directives():
    body, notes, warnings = job_of((SEED / "1.conda-train.sbatch").read_text(), Setting("team", "smith", "cli"))
    cfg = json.loads(body["env"]["FAIRPOD_SBATCH"])
    assert body["name"] == "cpu-ddp-conda" and body["nodes"] == 2 and body["team"] == "smith"
    assert "accelerators" not in body  # --exclusive: whole nodes
    assert body["auto_resume"] is True and body["max_retry"] == 3
    assert any("srun --auto-resume=1 (line" in n for n in notes)
    assert cfg["output"] == "logs/%x_%j.out" and cfg["wait_all_nodes"] is True and cfg["name"] == "cpu-ddp-conda"
    assert body["command"] == ["/py", "-m", "fairpod.formats.slurm.runner", "a1"]
    assert warnings == []


def test_directive_forms_overrides_warnings_and_refusals():
    text = """#!/bin/bash
# a comment
#SBATCH -N2 -J My_Job
#SBATCH --ntasks-per-node 4   # four tasks
#SBATCH --gres=gpu:a10g:2,nvme:1
#SBATCH --time=01:00:00
#SBATCH --frobnicate=yes
#SBATCH --open-mode=append -e err-%j.txt
#FAIRPOD --priority training --grace-seconds 45
echo hi
#SBATCH --nodes 8
"""
    body, notes, warnings = job_of(text, Setting("nodes", "3", "command line"), Setting("account", "john", "command line"))
    cfg = json.loads(body["env"]["FAIRPOD_SBATCH"])
    assert body["nodes"] == 3  # the command line wins; the #SBATCH after 'echo' is ignored
    assert body["name"] == "my-job" and cfg["name"] == "My_Job"
    assert body["accelerators"] == 2.0 and cfg["gpus_per_node"] == 2 and cfg["ntasks_per_node"] == 4
    assert body["priority"] == "training" and body["termination_grace_seconds"] == 45.0 and body["team"] == "john"
    assert cfg["open_mode"] == "append" and cfg["error"] == "err-%j.txt"
    assert body["auto_resume"] is False and body["max_retry"] == 0
    joined = "\n".join(warnings)
    assert "line 6: --time has no effect on fairpod" in joined
    assert "line 7: #SBATCH --frobnicate is not supported by fairpod and is ignored" in joined
    assert "nvme:1" in joined
    assert "line 11: #SBATCH after the first command is ignored" in joined
    for bad, msg in [("#SBATCH --hold", "held jobs are not supported"),
                     ("#SBATCH --dependency=afterok:3", "dependencies are not supported"),
                     ("#FAIRPOD --prority high", "unknown option --prority"),
                     ("#SBATCH --nodes", "--nodes needs a value"),
                     ("#SBATCH --output='unterminated", "cannot read the directive")]:
        with pytest.raises(BatchError, match=msg):
            job_of(f"#!/bin/sh\n{bad}\n")
    with pytest.raises(BatchError, match="first line must start with #!"):
        read_script("x.sh", "echo no shebang\n")
    with pytest.raises(BatchError, match="--nodes must be at least 1"):
        job_of("#!/bin/sh\n#SBATCH --nodes=0\n")
    with pytest.raises(BatchError, match="--open-mode is append or truncate"):
        job_of("#!/bin/sh\n#SBATCH --open-mode=sometimes\n")


def test_auto_resume_choices():
    assert job_of("#!/bin/sh\nsrun --auto-resume=1 true\n")[0]["auto_resume"] is True
    assert job_of("#!/bin/sh\n# srun --auto-resume=1 in a comment\nsrun true\n")[0]["auto_resume"] is False
    assert job_of("#!/bin/sh\n#SBATCH --requeue\n")[0]["auto_resume"] is True
    body = job_of("#!/bin/sh\n#FAIRPOD --no-auto-resume\nsrun --auto-resume=1 true\n")[0]
    assert body["auto_resume"] is False
    body = job_of("#!/bin/sh\n#FAIRPOD --auto-resume --max-retry 7\n")[0]
    assert body["auto_resume"] is True and body["max_retry"] == 7


def test_export_leaves_credentials_out():
    environ = {"PATH": "/x", "CONDA_PREFIX": "/c", "FAIRPOD_TOKEN": "t", "AWS_SECRET_ACCESS_KEY": "s",
               "GITHUB_TOKEN": "g", "MY_PASSWORD": "p", "PWD": "/here", "SLURM_JOB_ID": "9", "HF_HOME": "/h"}
    env, skipped = exported_env(None, environ)
    assert env == {"PATH": "/x", "CONDA_PREFIX": "/c", "HF_HOME": "/h"}
    assert skipped == ["AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "MY_PASSWORD"]
    assert exported_env("NONE,A=1", environ)[0] == {"A": "1"}
    assert exported_env("PATH,HF_HOME,B=2", environ)[0] == {"PATH": "/x", "HF_HOME": "/h", "B": "2"}
    assert job_name("1.conda-train.sbatch") == "1-conda-train-sbatch" and job_name("__") == "sbatch"


def test_hostlists():
    assert expand("workers-[0-2,5],login") == ["workers-0", "workers-1", "workers-2", "workers-5", "login"]
    assert expand("n[01-03]") == ["n01", "n02", "n03"]
    assert compress(["workers-0", "workers-1", "workers-2", "workers-5", "login"]) == "workers-[0-2,5],login"
    assert compress(["workers-3", "workers-1"]) == "workers-[3,1]"  # order kept: the first is the batch host
    assert expand(compress(["n01", "n02", "n10"])) == ["n01", "n02", "n10"]
    assert compress(["a"]) == "a" and compress(["a-7"]) == "a-7"
    for bad in ("n[1-", "n]", "n[a-b]", "n[3-1]"):
        with pytest.raises(HostlistError):
            expand(bad)


def test_output_patterns():
    env = {"FAIRPOD_JOB_ID": "12", "SLURM_JOB_NAME": "cpu-ddp-conda"}
    assert expand_pattern("logs/%x_%j.out", env, "workers-0") == "logs/cpu-ddp-conda_12.out"
    assert expand_pattern("%N-%4j-%%-%q", env, "workers-0") == "workers-0-0012-%-%q"


def test_srun_options_and_layout():
    o = parse(["--nodes=1", "--ntasks=1", "-w", "workers-3", "hostname", "--ip-address"])
    assert o.nodes == 1 and o.ntasks == 1 and o.nodelist == ["workers-3"] and o.command == ["hostname", "--ip-address"]
    o = parse(["--auto-resume=1", "-l", "-K", "./pt_cpu/bin/torchrun", "--nnodes", "2", "ddp.py"])
    assert o.auto_resume and o.label and o.kill_on_bad_exit and o.command[0] == "./pt_cpu/bin/torchrun"
    assert parse(["--mpi=pmix", "true"]).notes
    for bad, msg in [(["--bogus", "x"], "unsupported option"), (["-N"], "needs a value"), ([], "no command"),
                     (["-N", "zero", "x"], "wants a number")]:
        with pytest.raises(SrunError, match=msg):
            parse(bad)
    nodes = ["w-2", "w-0", "w-3"]
    assert layout(Options(command=["x"]), nodes, 1) == [(0, [0]), (1, [1]), (2, [2])]
    assert layout(Options(command=["x"]), nodes, 2) == [(0, [0, 1]), (1, [2, 3]), (2, [4, 5])]
    assert layout(Options(ntasks=4, command=["x"]), nodes, 1) == [(0, [0, 1]), (1, [2]), (2, [3])]
    assert layout(Options(nodelist=["w-3"], command=["x"]), nodes, 1) == [(2, [0])]
    with pytest.raises(SrunError, match="not part of this job"):
        layout(Options(nodelist=["w-9"], command=["x"]), nodes, 1)
    with pytest.raises(SrunError, match="the job has 3"):
        layout(Options(nodes=4, command=["x"]), nodes, 1)


def test_torchrun_rendezvous_is_pointed_at_the_loopback():
    nodes = {"workers-0", "workers-1"}
    cmd, notes = rewrite_torchrun(["torchrun", "--nproc_per_node=4", "--nnodes=2", "--rdzv_backend=c10d",
                                   "--rdzv_endpoint=workers-0", "ddp.py", "--rdzv_endpoint=keep"], nodes, "4242")
    assert cmd[4] == "--rdzv_endpoint=127.0.0.1:4242" and cmd[-1] == "--rdzv_endpoint=keep" and notes
    cmd, _ = rewrite_torchrun(["./pt_cpu/bin/torchrun", "--rdzv_endpoint", f"{socket.gethostname()}:29500",
                               "x.py"], nodes, "4242")
    assert cmd[2] == "127.0.0.1:29500"
    cmd, _ = rewrite_torchrun(["python", "-m", "torch.distributed.run", "--master_addr", "workers-1", "x.py"],
                              nodes, "1")
    assert cmd[4] == "127.0.0.1"
    same = ["torchrun", "--rdzv_endpoint=10.9.9.9:29500", "x.py"]
    assert rewrite_torchrun(same, nodes, "1") == (same, [])
    assert rewrite_torchrun(["python", "train.py", "--rdzv_endpoint=workers-0"], nodes, "1")[1] == []


# -- PyTorchJob manifests -------------------------------------------------------------------------------


def manifests(name: str) -> list:
    return [d for d in yaml.safe_load_all((SEED / name).read_text()) if d]


def test_the_seed_manifest_converts():
    jobs, warnings = convert_all(manifests("fsdp-john.yaml"), python="/py", cwd="/work", on_host=True)
    assert len(jobs) == 1 and "skipped Service/etcd, Deployment/etcd" in warnings[0]
    j = jobs[0]
    b = j.body
    assert b["name"] == "fsdp" and b["team"] == "john" and b["nodes"] == 2 and b["accelerators"] == 4
    # restartPolicy OnFailure without runPolicy.backoffLimit (nor HyperPod's annotations): fairpod's 3 restarts
    assert b["priority"] == "training" and b["auto_resume"] is True and b["max_retry"] == 3
    assert b["command"][:4] == ["/py", "-m", "fairpod.formats.kube.pod", "--"]
    assert b["env"]["LOGLEVEL"] == "DEBUG" and b["env"]["NCCL_SOCKET_IFNAME"] == "^lo"
    assert json.loads(b["env"]["FAIRPOD_PYTORCHJOB"]) == {"elastic": True, "max_restarts": 100}
    text = "\n".join(j.warnings)
    assert "container image 123456789012.dkr.ecr" in text and "is not used (--on-host)" in text
    assert "vpc.amazonaws.com/efa" in text
    assert "volumes are not mounted" in text and "rendezvous etcd at etcd:2379" in text
    assert any("team john (namespace hyperpod-ns-john)" in n for n in j.notes)
    # rdzvBackend etcd, minReplicas 1, maxReplicas 64: not fairpod's rendezvous, so 2 replicas exactly (preempted
    # and resumed whole, never shrunk)
    assert "min_nodes" not in b and "max_nodes" not in b
    assert any("the etcd rendezvous it names is not fairpod's; fairpod runs exactly 2 replicas" in n for n in j.notes)


def test_manifest_fields_and_errors():
    base = manifests("fsdp-smith.yaml")[-1]
    j = convert(base, python="/py", cwd="/work")
    assert j.body["team"] == "smith" and j.body["auto_resume"] is True and j.body["max_retry"] == 2
    assert j.body["instance_type"] == "ml.g5.12xlarge" and j.body["vcpu"] == 8 and j.body["memory_gib"] == 32

    def broken(mut: dict) -> str:
        doc = json.loads(json.dumps(base))
        for path, value in mut.items():
            cur = doc
            keys = path.split(".")
            for k in keys[:-1]:
                cur = cur[int(k)] if isinstance(cur, list) else cur[k]
            if value is None:
                del cur[keys[-1]]
            else:
                cur[keys[-1]] = value
        with pytest.raises(ManifestError) as e:
            convert(doc, python="/py", cwd="/work")
        return str(e.value)

    tpl = "spec.pytorchReplicaSpecs.Worker.template"
    assert "which team" in broken({"metadata.namespace": "kubeflow", "metadata.labels": {},
                                   f"{tpl}.metadata.labels": {}})
    assert "different teams" in broken({"metadata.namespace": "hyperpod-ns-john"})
    assert "no command" in broken({f"{tpl}.spec.containers.0.command": None, f"{tpl}.spec.containers.0.image": None})
    assert "replicas must be" in broken({"spec.pytorchReplicaSpecs.Worker.replicas": 0})
    assert "unknown replica type" in broken({"spec.pytorchReplicaSpecs.Chief": {}})
    assert "not a whole number" in broken({"metadata.annotations": {
        "sagemaker.amazonaws.com/enable-job-auto-resume": "true", "sagemaker.amazonaws.com/job-max-retry-count": "x"}})
    assert "metadata.name" in broken({"metadata.name": "Bad_Name"})
    with pytest.raises(ManifestError, match="no PyTorchJob"):
        convert_all(manifests("fsdp-john.yaml")[:2], python="/py", cwd="/w")
    assert quantity("500m", "x") == 0.5 and quantity("32Gi", "x") == 32 * 2**30 and quantity(4, "x") == 4
    with pytest.raises(ManifestError):
        quantity("lots", "x")


def test_pod_env_like_the_training_operator(tmp_path: Path):
    env = {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "4000",
           "FAIRPOD_RUN_ID": "7-0-1", "FAIRPOD_PYTORCHJOB": json.dumps({"elastic": True, "max_restarts": 3})}
    e = pod_env(env)
    assert e["PET_RDZV_BACKEND"] == "c10d" and e["PET_RDZV_ENDPOINT"] == "127.0.0.1:4000"
    assert e["PET_NNODES"] == "2" and e["PET_MAX_RESTARTS"] == "3" and e["PET_RDZV_ID"] == "7-0-1"
    assert "FAIRPOD_PYTORCHJOB" not in e
    e = pod_env({**env, "FAIRPOD_PYTORCHJOB": json.dumps({"elastic": False, "nproc_per_node": "2"})})
    assert (e["PET_NODE_RANK"], e["PET_MASTER_PORT"], e["PET_NPROC_PER_NODE"]) == ("1", "4000", "2")
    tool = tmp_path / "bin" / "mytool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert resolve("/usr/local/bin/mytool", str(tool.parent)) == str(tool)
    assert resolve("/usr/local/bin/nothing-like-it", str(tool.parent)) is None
    assert resolve("mytool", None) == "mytool"


def test_manifest_topology_annotations():
    base = manifests("fsdp-smith.yaml")[-1]
    assert "required_topology" not in convert(base, python="/py", cwd="/work").body
    doc = json.loads(json.dumps(base))
    tpl = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    tpl.setdefault("metadata", {})["annotations"] = {
        "kueue.x-k8s.io/podset-required-topology": "cloud.provider.com/topology-rack"}
    assert convert(doc, python="/py", cwd="/work").body["required_topology"] == "rack"
    tpl["metadata"]["annotations"] = {"kueue.x-k8s.io/podset-preferred-topology": "block"}
    assert convert(doc, python="/py", cwd="/work").body["preferred_topology"] == "block"
    doc["metadata"].setdefault("annotations", {})["kueue.x-k8s.io/podset-required-topology"] = "rack"
    with pytest.raises(ManifestError, match="give one, not both"):
        convert(doc, python="/py", cwd="/work")


def test_sbatch_topology_lines():
    body, _, warnings = job_of("#!/bin/bash\n#SBATCH -N4\n#FAIRPOD --required-topology rack\nsrun hostname\n")
    assert body["required_topology"] == "rack" and "preferred_topology" not in body and not warnings
    body, _, _ = job_of("#!/bin/bash\n#SBATCH -N4\nsrun hostname\n", Setting("preferred_topology", "block",
                                                                                 "command line"))
    assert body["preferred_topology"] == "block"


def test_manifest_mig_partitions():
    doc = json.loads(json.dumps(manifests("fsdp-smith.yaml")[-1]))
    c = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    c["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": 2}}
    for rtype in doc["spec"]["pytorchReplicaSpecs"]:
        doc["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]["resources"] = c["resources"]
    b = convert(doc, python="/py", cwd="/work").body
    assert b["accelerator_partition_type"] == "mig-1g.10gb" and b["accelerator_partition_count"] == 2
    assert "accelerators" not in b
    c["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/gpu": 1}}
    for rtype in doc["spec"]["pytorchReplicaSpecs"]:
        doc["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]["resources"] = c["resources"]
    with pytest.raises(ManifestError, match="whole GPUs and MIG partitions at once"):
        convert(doc, python="/py", cwd="/work")
