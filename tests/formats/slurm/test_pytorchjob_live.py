"""The seed post's PyTorchJob manifests through 'fairpod apply -f': john's job at 50 %, smith borrowing to
100 %, smith's auto-resume annotations restarting a killed replica."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

from .conftest import Server, wait_for

SEED = Path(__file__).parent / "seed"


def manifest(tmp_path: Path, name: str, seconds: float) -> Path:
    """The seed manifest, 'training' for ``seconds``."""
    text = (SEED / name).read_text().replace("          env:\n", "          env:\n"
                                               f"                - name: TRAIN_SECONDS\n"
                                               f"                  value: '{seconds}'\n", 1)
    p = tmp_path / name
    p.write_text(text)
    return p


def test_seed_manifests_share_the_cluster_and_auto_resume(server: Server, tmp_path: Path):
    r = server.cli("apply", "--on-host", "-f", str(manifest(tmp_path, "fsdp-john.yaml", 60)), check=False)
    assert r.returncode == 0, r.stderr
    assert re.match(r"pytorchjob\.kubeflow\.org/fsdp created: fairpod job \d+ for team john, 2 replica", r.stdout)
    assert "skipped Service/etcd, Deployment/etcd" in r.stderr
    assert "container image 123456789012.dkr.ecr.us-west-2.amazonaws.com/hyprpd-tskgvrn-fsdp:pytorch2.2 is not " \
           "used (--on-host)" in r.stderr
    john = server.wait_state("fsdp", "Running")
    assert john["team"] == "john" and john["priority"] == "training" and john["accelerators_per_node"] == 4
    assert server.api("GET", "/cluster").json()["capacity"]["ml.g5.12xlarge"]["utilization"] == 0.5

    r = server.cli("apply", "--on-host", "-f", str(manifest(tmp_path, "fsdp-smith.yaml", 60)), "-o", "json",
                   check=False)
    assert r.returncode == 0, r.stderr
    smith = json.loads(r.stdout)
    assert smith["team"] == "smith" and smith["auto_resume"] is True and smith["max_retry"] == 2
    wait_for(lambda: server.api("GET", f"/jobs/{smith['id']}").json()["state"] == "Running", 20, "smith's job")
    cluster = server.api("GET", "/cluster").json()
    assert cluster["capacity"]["ml.g5.12xlarge"]["utilization"] == 1.0
    rows = {t["team"]: t for t in cluster["teams"]}
    assert rows["smith"]["borrowed_from"] == {"john": 4}

    # each replica got what the training operator would give it, and the manifest's env
    def log(job_id: int, attempt: int, rank: int) -> str:
        f = server.home / "runs" / f"fsdp-{job_id}" / str(attempt) / str(rank) / "output.log"
        return f.read_text() if f.exists() else ""

    # the whole line: with PYTHONUNBUFFERED=1 (fairpod's default) print writes its pieces one by one, and a
    # fresh-clone run read the line cut before its args
    out = wait_for(lambda: re.search(r"replica RANK=1[^\n]*\n", o := log(smith["id"], 0, 1)) and o, 30,
                   "smith's replica 1")
    port = re.search(r"PET_RDZV_ENDPOINT=127\.0\.0\.1:(\d+)", out)
    assert port and "RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 PET_NNODES=2 PET_RDZV_BACKEND=c10d" in out
    assert "PET_MAX_RESTARTS=100 LOGLEVEL=DEBUG FAIRPOD_TEAM=smith FAIRPOD_RESTART_COUNT=0" in out
    assert "args ['--checkpoint_dir=/checkpoints', '--max_steps=5000']" in out

    # sagemaker.amazonaws.com/enable-job-auto-resume: a killed replica restarts the job
    child = server.home / "runs" / f"fsdp-{smith['id']}" / "0" / "1" / "child.pid"
    os.kill(int(child.read_text().split()[0]), signal.SIGKILL)
    wait_for(lambda: server.api("GET", f"/jobs/{smith['id']}").json()["restarts"] == 1, 30, "the auto-resume")
    wait_for(lambda: "FAIRPOD_RESTART_COUNT=1" in log(smith["id"], 1, 0), 60, "the restarted replica")
    for jid in (john["id"], smith["id"]):
        server.api("POST", f"/jobs/{jid}/cancel")


def test_bad_manifests_are_refused_clearly(server: Server, tmp_path: Path):
    cases = {
        "only-etcd.yaml": ((SEED / "fsdp-john.yaml").read_text().split("---\napiVersion: 'kubeflow.org/v1'")[0],
                           "no PyTorchJob in the file"),
        "no-team.yaml": ((SEED / "fsdp-john.yaml").read_text().replace("hyperpod-ns-john", "default"),
                         "'default-localqueue' is no LocalQueue of a team of this cluster"),
        "unknown-team.yaml": ((SEED / "fsdp-john.yaml").read_text().replace("hyperpod-ns-john", "hyperpod-ns-bob"),
                              "'hyperpod-ns-bob-localqueue' is no LocalQueue of a team of this cluster"),
        "spec-and-job.yaml": ("cluster: {}\n---\nkind: Service\n", "no PyTorchJob in the file"),
        "two-specs.yaml": ("a: 1\n---\nb: 2\n", "a cluster spec is one YAML document; found 2"),
    }
    for name, (text, msg) in cases.items():
        (tmp_path / name).write_text(text)
        r = server.cli("apply", "-f", str(tmp_path / name), check=False)
        assert r.returncode == 1 and msg in r.stderr and "Traceback" not in r.stderr, (name, r.stderr)
