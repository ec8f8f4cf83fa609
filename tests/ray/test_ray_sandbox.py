"""The sandbox on the Ray executor: the node agent's supervisor gives a replica the same cgroup as the local
executor does, so a memory hog ends with the memory reason, and its usage comes back to the job."""

from __future__ import annotations

import sys

import pytest

from fairpod.sandbox import cgroups

from .conftest import RayServer


def test_a_memory_hog_on_ray_is_killed_with_the_memory_reason(ray_server: RayServer) -> None:
    try:
        cgroups.detect()
    except cgroups.CgroupError as e:
        pytest.skip(f"no usable cgroup hierarchy on this host: {e}")
    hog = "x = []\nwhile True: x.append(bytearray(8 * 2**20))"
    ray_server.submit(name="hog", team="john", command=[sys.executable, "-c", hog], vcpu=0.5, memory_gib=0.25)
    job = ray_server.wait_state("hog", "Failed", timeout=120)
    assert job["reason"] == "replica 0 exceeded its memory limit (0.25 GiB) and was killed"
    assert 0 < job["usage"]["memory_peak_bytes"] <= 0.25 * 2**30
