"""pyxis's flags through 'fairpod sbatch' on a real server with real podman: a script whose only command is
'srun --container-image=REGISTRY#IMAGE --container-mounts=…' runs that command in the image on each node, and
'#SBATCH --container-image=docker://…' runs the batch script itself in the image; both end Succeeded. The image
is built locally (tests/sandbox/images.py; no registry is reached) with a file only the image has."""

from __future__ import annotations

import re
from pathlib import Path

from tests.sandbox import images

from .conftest import Server
from .test_sbatch_live import sbatch

IMAGE = "localhost/fairpod-test/pyxis:1"
SRUN = """#!/bin/bash
#SBATCH --job-name=pyxis-srun
#SBATCH --nodes=2
#FAIRPOD --team john
srun --container-image=localhost#fairpod-test/pyxis:1 --container-mounts={data}:/data:ro \\
     --no-container-mount-home sh -c 'echo "step $SLURM_PROCID/$SLURM_NTASKS job $SLURM_JOB_ID: $(cat /pyxis-marker) \
$(cat /data/input.txt)"'
"""
BATCH = """#!/bin/sh
#SBATCH --job-name=pyxis-batch
#SBATCH --container-image=docker://localhost#fairpod-test/pyxis:1
#FAIRPOD --team john
echo "batch in the image: job $SLURM_JOB_ID nodes $SLURM_JOB_NUM_NODES args $*: $(cat /pyxis-marker)"
"""


def log(server: Server, job: dict, rank: int) -> str:
    return (server.home / "runs" / f"{job['name']}-{job['id']}" / "0" / str(rank) / "output.log").read_text()


def test_pyxis_flags_run_the_step_and_the_batch_script_in_the_image(server: Server, tmp_path: Path):
    images.derived(IMAGE, images.busybox(), {"/pyxis-marker": "inside-the-image\n"})
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    (data / "input.txt").write_text("mounted-input\n")
    (data / "input.txt").chmod(0o644)
    (tmp_path / "srun.sbatch").write_text(SRUN.format(data=data))
    (tmp_path / "batch.sbatch").write_text(BATCH)

    r = sbatch(server, tmp_path, "--wait", "srun.sbatch")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "each node's task runs sh -c" in r.stderr and "image localhost/fairpod-test/pyxis:1" in r.stderr
    jid = re.fullmatch(r"Submitted batch job (\d+)\n", r.stdout).group(1)
    job = server.job(jid)
    assert job["state"] == "Succeeded" and job["image"] == IMAGE, job
    for rank in (0, 1):
        assert f"step {rank}/2 job {jid}: inside-the-image mounted-input" in log(server, job, rank)

    r = sbatch(server, tmp_path, "--wait", "batch.sbatch", "x1")
    assert r.returncode == 0, r.stdout + r.stderr
    jid = re.fullmatch(r"Submitted batch job (\d+)\n", r.stdout).group(1)
    job = server.job(jid)
    assert job["state"] == "Succeeded", job
    out = log(server, job, 0)
    assert f"batch in the image: job {jid} nodes 1 args x1: inside-the-image" in out, out
