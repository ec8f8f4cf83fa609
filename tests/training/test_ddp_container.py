"""The DDP example in a container image, end to end on a real server with real podman: smith's 2-replica gloo
job runs in the locally built Python image (a Debian root filesystem with python3; torch comes from this
machine's virtual environment, mounted read-only at its own path, and fairpod's sdk from the repository, the
job's working directory); john reclaims the node it borrowed, so every rank stops at the same step and rank 0
snapshots it inside the container, into the job's checkpoint directory mounted at its own path; once john's job
is cancelled, smith's resumes from that snapshot and finishes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ..sandbox import images
from .conftest import Server, wait_for

torch = pytest.importorskip("torch", reason="torch is not installed: the DDP example cannot run")

REPO = Path(__file__).resolve().parents[2]
SITE = str(Path(torch.__file__).resolve().parents[1])  # the site-packages torch lives in
EPOCHS, SAVE_EVERY, DATASET, BATCH = 16, 4, 1024, 32


def ddp_command() -> list[str]:
    """One torchrun per replica (1 process each), static rendezvous on the job's port, in the image's python3."""
    return ["sh", "-c", 'exec python3 -m torch.distributed.run --nnodes "$NNODES" --nproc_per_node 1 '
            '--node_rank "$NODE_RANK" --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" '
            f'examples/ddp/ddp.py {EPOCHS} {SAVE_EVERY} --dataset_size {DATASET} --batch_size {BATCH} '
            '--log_every 1 --timeout 60 --backend gloo']


def log(server: Server, job: dict, attempt: int, rank: int = 0) -> str:
    f = server.home / "runs" / f"{job['name']}-{job['id']}" / str(attempt) / str(rank) / "output.log"
    return f.read_text(errors="replace") if f.exists() else ""


@pytest.mark.slow
@pytest.mark.timeout(1500)  # training takes as long as the machine is slow: its waits are bounded by stalls (no log
# output for 120 s) and 900 s each, not by the suite's 300 s per test
def test_ddp_in_an_image_is_preempted_and_resumes_from_its_checkpoint(server: Server):
    image = images.python()
    smith = server.submit(name="smith-img", team="smith", nodes=2, image=image, image_pull_policy="Never",
                          workdir=str(REPO), mounts=[f"{SITE}:{SITE}:ro"], command=ddp_command(),
                          env={"PYTHONPATH": f"{SITE}:{REPO / 'src'}"}, termination_grace_seconds=30)
    server.wait_state("smith-img", "Running", 60)
    first = wait_for(lambda: (x := server.job("smith-img")["checkpoint"])["step"] and x, 120,
                     "smith's first snapshot report, from inside the container", server.activity)
    assert first["path"].endswith("snapshot.pt")
    out0 = log(server, smith, 0)
    assert "engine podman" in out0 and f"image {image} cached on this node" in out0

    john = server.submit(name="john-big", team="john", nodes=3, command=["sleep", "600"])
    j = wait_for(lambda: (x := server.job("smith-img"))["preemptions"] == 1 and x, 60, "the reclaim")
    assert "reclaimed by team john" in j["reason"]
    out = wait_for(lambda: "preempted at step" in (o := log(server, smith, 0)) and o, 90, "smith's snapshot", server.activity)
    preempted_at = int(re.search(r"preempted at step (\d+)", out).group(1))
    wait_for(lambda: "JobRequeued" in [e["kind"] for e in server.job("smith-img")["events"]], 90,
             "smith's containers to stop and the job to go back to its queue")
    assert server.api("POST", f"/jobs/{john['id']}/cancel").status_code == 200

    out = wait_for(lambda: "Resuming training" in (o := log(server, smith, 0).split("preempted at step")[-1]) and o,
                   120, "smith's resume (the attempt goes on after a preemption: the same log)", server.activity)
    resumed_at = int(re.search(r"Resuming training from snapshot .*\(step (\d+), restart 0\)", out).group(1))
    assert resumed_at == preempted_at
    done = server.wait_state("smith-img", "Succeeded", 120, server.activity)
    assert done["preemptions"] == 1 and done["checkpoint"]["step"] == EPOCHS * DATASET // 2 // BATCH
    snap = Path(done["checkpoint"]["path"])
    assert snap.is_relative_to(server.home / "checkpoints" / "smith") and snap.exists()
