"""MIG partitions end to end: a real server, replicas that report the partitions (slots) they were given, the CLI."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import Server, running, wait_for

MIG = "ml.p4de.24xlarge.mig-1g.10gb"
SPEC = f"""
cluster:
  name: mig
  instance_groups:
    - {{name: mig, instance_type: ml.p4de.24xlarge, count: 1, accelerator_partition_type: mig-1g.10gb}}
teams:
  - {{name: a, quota: [{{instance_type: {MIG}, accelerators: 14}}]}}
  - {{name: b, quota: [{{instance_type: {MIG}, accelerators: 42}}]}}
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, SPEC)


def test_jobs_get_mig_partitions_within_their_quota(server: Server, tmp_path: Path):
    got: dict[str, list[int]] = {}
    for name, count in (("p3", 3), ("p4", 4)):
        out = tmp_path / f"{name}.acc"
        server.cli("start-job", "--name", name, "--team", "a", "--accelerator-partition-type", "mig-1g.10gb",
                   "--accelerator-partition-count", str(count), "--grace-seconds", "1", "--",
                   "sh", "-c", f'echo "$FAIRPOD_ACCELERATORS" > {out}; exec sleep 120')
        server.wait_state(name, "Running")
        text = wait_for(lambda out=out: out.exists() and out.read_text().strip(), 20, f"{name}'s partitions")
        got[name] = [int(x) for x in text.split(",")]
        assert len(got[name]) == count and all(0 <= x < 56 for x in got[name])
    assert not set(got["p3"]) & set(got["p4"])  # no partition given twice
    assert got == {"p3": [0, 1, 2], "p4": [3, 4, 5, 6]}  # packed onto one GPU (slots 0-6), best fit
    job = server.job("p3")
    assert job["instance_type"] == MIG and job["accelerators_per_node"] == 3
    # a's quota is 14 partitions: 8 more would borrow b's idle ones
    server.cli("start-job", "--name", "p8", "--team", "a", "--accelerator-partition-type", "mig-1g.10gb",
               "--accelerator-partition-count", "8", "--", "sleep", "120")
    wait_for(lambda: "borrowing 1 accelerators" in server.job("p8")["reason"], 20, "p8 to borrow")
    show = server.cli("cluster", "show").stdout
    row = next(line for line in show.splitlines() if line.startswith("a ") and MIG in line)
    assert "14 partitions" in row and "15 partitions" in row, show  # quota 14, in use 3 + 4 + 8
    bad = server.cli("start-job", "--name", "x", "--team", "a", "--accelerator-partition-type", "mig-3g.40gb",
                     "--", "true", check=False)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1
    assert "no instance group splits its GPUs into mig-3g.40gb" in bad.stderr


def test_real_mig_partitions_get_their_device_uuids(tmp_path: Path):
    """accelerators_are: gpus with a FAKE NVML (tests only) listing each GPU's MIG devices."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("accelerator_partition_type: mig-1g.10gb}",
                                 "accelerator_partition_type: mig-1g.10gb, accelerators_are: gpus}"))
    nvml = tmp_path / "mig-nvml.json"
    gpus = [{"name": "NVIDIA A100-SXM4-80GB", "uuid": f"GPU-{i}", "memory_mib": 81920,
             "mig_devices": [f"MIG-{i}-{k}" for k in range(7)]} for i in range(8)]
    nvml.write_text(json.dumps({"gpus": gpus}))
    s = Server(tmp_path, spec)
    s.env["FAIRPOD_FAKE_NVML"] = str(nvml)
    s.start()
    try:
        out = tmp_path / "env.txt"
        s.cli("start-job", "--name", "m", "--team", "b", "--accelerator-partition-type", "mig-1g.10gb",
              "--accelerator-partition-count", "9", "--", "sh", "-c",
              f'echo "$FAIRPOD_ACCELERATORS $CUDA_VISIBLE_DEVICES" > {out}; exec sleep 120')
        s.wait_state("m", "Running")
        slots, visible = wait_for(lambda: out.exists() and out.read_text().split(), 20, "the replica's env")
        want = [f"MIG-{int(k) // 7}-{int(k) % 7}" for k in slots.split(",")]
        assert visible.split(",") == want and len(want) == 9  # 9 partitions: over two GPUs
        # GPUs whose MIG devices are not there (MIG not configured): the job fails with the reason
        nvml.write_text(json.dumps({"gpus": [{k: v for k, v in g.items() if k != "mig_devices"} for g in gpus]}))
        s.cli("start-job", "--name", "n", "--team", "b", "--accelerator-partition-type", "mig-1g.10gb", "--",
              "true")
        job = s.wait_state("n", "Failed")
        assert "has no MIG device" in job["reason"] and "FAKE NVML" in job["reason"], job["reason"]
    finally:
        s.kill(signal.SIGTERM)
        s.kill_replicas()
