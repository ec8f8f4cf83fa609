"""pyxis's container flags in a batch script become an image job (fairpod.formats.slurm.pyxis), without a
server: the image reference, mounts, environment and command of the job, and the refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fairpod.formats.slurm.pyxis import PyxisError, image_ref, mounts
from fairpod.formats.slurm.sbatch import BatchError, Setting, read_script, to_job
from fairpod.formats.slurm.srun import SrunError, parse
from fairpod.model.jobs import JobSpec


def job_of(text: str, tmp: Path, env: dict[str, str] | None = None) -> tuple[dict, list[str]]:
    bs = read_script("job.sbatch", text)
    bs.settings.append(Setting("team", "john", "command line"))  # sbatch --team john
    return to_job(bs, ["a1"], cwd=str(tmp), environ=env or {"PATH": "/host/bin", "MY": "v"}, python="/py")


def test_image_references_as_enroot_reads_them():
    assert image_ref("docker://nvcr.io#nvidia/pytorch:24.01-py3") == "nvcr.io/nvidia/pytorch:24.01-py3"
    assert image_ref("nvcr.io#nvidia/pytorch:24.01-py3") == "nvcr.io/nvidia/pytorch:24.01-py3"
    assert image_ref("localhost:5000#team/img:1") == "localhost:5000/team/img:1"
    assert image_ref("ubuntu:22.04") == "docker.io/library/ubuntu:22.04"
    assert image_ref("docker://pytorch/pytorch:2.1") == "docker.io/pytorch/pytorch:2.1"
    for bad, words in (("/scratch/img.sqsh", "squashfs"), ("dockerd://img", "only docker://"),
                       ("me@nvcr.io#nvidia/pytorch:1", "registry login"),
                       ("nvcr.io/nvidia/pytorch:1", "write nvcr.io#nvidia/pytorch:1")):
        with pytest.raises(PyxisError, match=words):
            image_ref(bad)


def test_mounts_as_pyxis_writes_them(tmp_path: Path):
    assert mounts("/data:/data:ro+rprivate,/scratch,out:/out", str(tmp_path)) == [
        "/data:/data:ro", "/scratch:/scratch", f"{tmp_path}/out:/out"]
    with pytest.raises(PyxisError, match="must be an absolute path"):
        mounts("/data:rel", "/")
    with pytest.raises(PyxisError, match="not known to fairpod"):
        mounts("/data:/data:weird", "/")


def test_srun_container_image_becomes_an_image_job(tmp_path: Path):
    text = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --job-name=pyx
srun --container-image=nvcr.io#nvidia/pytorch:24.01-py3 \\
     --container-mounts=/data:/data:ro --container-env=PATH --no-container-mount-home \\
     python train.py --epochs 3
"""
    body, notes = job_of(text, tmp_path)
    assert body["image"] == "nvcr.io/nvidia/pytorch:24.01-py3" and body["nodes"] == 2
    assert body["command"] == ["python", "train.py", "--epochs", "3"]
    assert body["mounts"] == ["/data:/data:ro"] and "workdir" not in body  # the image's own, as with pyxis
    env = body["env"]
    assert "FAIRPOD_SBATCH" not in env and env["PATH"] == "/host/bin" and env["MY"] == "v"  # --container-env=PATH
    assert env["SLURM_PROCID"] == "$(RANK)" and env["SLURM_NTASKS"] == "2" and env["SLURM_JOB_ID"] == "$(FAIRPOD_JOB_ID)"
    assert any("each node's task runs python train.py --epochs 3 in the image" in n for n in notes)
    JobSpec.model_validate(body)  # what the server accepts


def test_sbatch_container_image_runs_the_script_in_the_image(tmp_path: Path):
    text = "#!/bin/sh\n#SBATCH --container-image=localhost#team/img:1\n#SBATCH --container-workdir=" \
           f"{tmp_path}\necho hi $1\n"
    body, notes = job_of(text, tmp_path)
    assert body["image"] == "localhost/team/img:1" and body["workdir"] == str(tmp_path)
    assert body["command"] == ["/bin/sh", "-c", text, "job.sbatch", "a1"]
    assert "PATH" not in body["env"]  # the image's PATH
    JobSpec.model_validate(body)


@pytest.mark.parametrize("text, words", [
    ("#!/bin/bash\n#SBATCH --container-image=ubuntu\nsrun hostname\n", "srun is not available"),
    ("#!/bin/bash\n#SBATCH -N2 --container-image=ubuntu\necho hi\n", "on one node"),
    ("#!/usr/bin/python3\n#SBATCH --container-image=ubuntu\nprint(1)\n", "is not a shell"),
    ("#!/bin/bash\n#SBATCH --container-name=x --container-image=ubuntu\necho\n", "--container-name: fairpod keeps"),
    ("#!/bin/bash\nsrun --container-image=ubuntu --container-remap-root id\n", "never as root"),
    ("#!/bin/bash\nsrun --container-image=ubuntu --no-container-entrypoint id\n", "entrypoint"),
    ("#!/bin/bash\nsrun --container-image=ubuntu echo $SLURM_PROCID\n", "plain words"),
    ("#!/bin/bash\n#SBATCH -N2\nsrun -N1 --container-image=ubuntu hostname\n", "one task on every node"),
    ("#!/bin/bash\n#SBATCH --container-mounts=/a:/a\necho\n", "go with --container-image"),
])
def test_what_cannot_be_honoured_is_refused_in_one_line(tmp_path: Path, text: str, words: str):
    with pytest.raises(BatchError, match=words) as e:
        job_of(text, tmp_path)
    assert "\n" not in str(e.value)


def test_srun_refuses_container_flags_it_would_not_honour():
    """Inside a host script srun decides when the script runs: a container step is refused then, by name."""
    with pytest.raises(SrunError, match="only command, or with #SBATCH --container-image"):
        parse(["--container-image=ubuntu", "hostname"])
    with pytest.raises(SrunError, match="squashfs file is enroot's image format"):
        parse(["-l", "--container-image", "/fsx/apps/pytorch.sqsh", "--container-mounts", "/fsx", "hostname"])


def test_container_steps_are_decided_when_the_script_runs(tmp_path: Path):
    """awsome-distributed-training's FSDP scripts put --container-image in an array inside
    ``if [ ! -z $CONTAINER_IMAGE ]``: with the variable unset the steps run on the node, so the script is a host
    job (not refused); a literal container step beside other commands is a host script too, its srun refusing
    the step when it runs; beside plain exports it is an image job with them in its environment."""
    fsdp = ("#!/bin/bash\n#SBATCH --nodes=2\nset -ex;\nif [ ! -z $CONTAINER_IMAGE ];\nthen\n    declare -a ARGS=(\n"
            "        --container-image $CONTAINER_IMAGE\n        --container-mounts $FSX_MOUNT\n    )\nfi\n"
            "srun -l \"${ARGS[@]}\" torchrun train.py\n")
    body, notes = job_of(fsdp, tmp_path)
    assert "image" not in body and body["command"][1:3] == ["-m", "fairpod.formats.slurm.runner"]
    assert any("refuses that step" in n for n in notes)
    body, _ = job_of("#!/bin/bash\necho start\nsrun --container-image=ubuntu hostname\n", tmp_path)
    assert "image" not in body
    body, _ = job_of("#!/bin/bash\nset -ex\nexport NCCL_DEBUG=INFO\nsrun --container-image=ubuntu hostname\n",
                     tmp_path)
    assert body["image"] == "docker.io/library/ubuntu" and body["env"]["NCCL_DEBUG"] == "INFO"


def test_sbatch_command_line_takes_pyxis_flags(tmp_path: Path):
    import json
    import subprocess
    import sys

    (tmp_path / "job.sh").write_text("#!/bin/sh\necho hi\n")
    env = {**os.environ, "FAIRPOD_HOME": str(tmp_path / "home"), "FAIRPOD_CONFIG": str(tmp_path / "config.yaml"),
           "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "sbatch", "--test-only", "--json", "--team", "john",
                        "--container-image=docker://alpine:3.19", "--container-mounts=/data:/data", "job.sh"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)["job"]
    assert job["image"] == "docker.io/library/alpine:3.19" and job["mounts"] == ["/data:/data"]
    assert job["command"][:2] == ["/bin/sh", "-c"]
