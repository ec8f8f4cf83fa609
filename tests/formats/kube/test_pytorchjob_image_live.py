"""The seed post's PyTorchJob, unchanged, through 'fairpod apply -f' on a real server with real podman: its image
(123456789012.dkr.ecr...:pytorch2.2, tagged locally: no registry is reachable here) runs its command
(/usr/local/bin/torchrun ... /fsdp/train.py ...), with the manifest's env, the training operator's PET_*
variables, its hostPath volumes at their mountPath (the host's /dev/shm as the container's own); imagePullPolicy: Always asks the registry, which cannot be
reached, so the cached image runs and the log says so."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.sandbox import images

from .conftest import Server

SEED = Path(__file__).parent / "seed" / "fsdp-image.yaml"
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/hyprpd-tskgvrn-fsdp:pytorch2.2"
TORCHRUN = """#!/bin/sh
echo "torchrun in the image: $*"
echo "PET_NNODES=$PET_NNODES PET_RDZV_BACKEND=$PET_RDZV_BACKEND PET_RDZV_ENDPOINT=$PET_RDZV_ENDPOINT \\
PET_MAX_RESTARTS=$PET_MAX_RESTARTS RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOGLEVEL=$LOGLEVEL uid=$(id -u)"
test -d /local && echo "/local is mounted"
test -f /fsdp/train.py && echo "/fsdp/train.py is the image's"
"""


def test_the_seed_pytorchjob_runs_its_image_unchanged(server: Server):
    images.derived(IMAGE, images.busybox(), {"/usr/local/bin/torchrun": TORCHRUN, "/fsdp/train.py": "# FSDP\n"})
    made = not Path("/mnt/k8s-disks").exists()
    if made:  # the node's local disk, as its administrator provides it (fairpod makes a missing one only as the
        Path("/mnt/k8s-disks/0").mkdir(parents=True)  # job's user, who may not write in /mnt)
    try:
        r = server.cli("apply", "-f", str(SEED), check=False)
        assert r.returncode == 0, r.stderr
        assert re.match(r"pytorchjob\.kubeflow\.org/fsdp created: fairpod job \d+ for team john", r.stdout)
        assert "image" not in r.stderr and "not mounted" not in r.stderr, r.stderr
        done = server.wait_state("fsdp", "Succeeded", 120)
        for rank in (0, 1):
            out = (server.home / "runs" / f"fsdp-{done['id']}" / "0" / str(rank) / "output.log").read_text()
            assert "the registry was not reached" in out and "the cached image runs" in out, out
            assert "torchrun in the image: --nproc_per_node=4 --nnodes=2 /fsdp/train.py --max_context_width=4096" \
                in out, out
            assert re.search(rf"PET_NNODES=2 PET_RDZV_BACKEND=c10d PET_RDZV_ENDPOINT=127\.0\.0\.1:\d+ "
                             rf"PET_MAX_RESTARTS=100 RANK={rank} WORLD_SIZE=2 LOGLEVEL=DEBUG uid=\d+", out), out
            assert "/local is mounted" in out and "/fsdp/train.py is the image's" in out
            # (uid=0: the container's root, which is the team's user on the host: tests/sandbox/test_container_attacks.py)
    finally:
        if made:
            shutil.rmtree("/mnt/k8s-disks", ignore_errors=True)
