"""Jobs in container images on the Ray executor: the node agent's supervisor starts the container on its node as
the local executor's does (fairpod.sandbox.container), with the replica's cgroup around it (a memory hog in the
container ends with the memory reason) and the replica's environment inside."""

from __future__ import annotations

from ..sandbox import images
from ..server.conftest import wait_for
from .conftest import RayServer


def test_a_container_on_a_ray_node_gets_its_replicas_rules(ray_server: RayServer) -> None:
    image = images.busybox()
    ray_server.submit(name="hog", team="john", image=image, image_pull_policy="Never", vcpu=0.5, memory_gib=0.25,
                      command=["dd", "if=/dev/zero", "of=/dev/null", "bs=400M", "count=1"])
    ray_server.submit(name="env", team="john", image=image, image_pull_policy="Never",
                      command=["sh", "-c", 'echo "in image: job=$FAIRPOD_JOB rank=$RANK of $WORLD_SIZE '
                               'uid=$(id -u)"; ls /usr/lib 2>&1 | head -1'])
    job = ray_server.wait_state("hog", "Failed", timeout=120)
    assert job["reason"] == "replica 0 exceeded its memory limit (0.25 GiB) and was killed", \
        ray_server.api("GET", f"/jobs/{job['id']}/logs").text
    env = wait_for(lambda: (j := ray_server.job("env"))["state"] in ("Succeeded", "Failed") and j, 120, "env to end")
    assert env["state"] == "Succeeded", ray_server.api("GET", f"/jobs/{env['id']}/logs").text
    out = ray_server.api("GET", f"/jobs/{env['id']}/logs").text
    assert f"in image: job=env-{env['id']} rank=0 of 1 uid=" in out, out
    assert "engine podman" in out and "No such file or directory" in out  # the image has no /usr/lib
