"""A job whose image cannot be pulled fails with the registry's answer and its own event, and its nodes stay
healthy: the image is the job's fault, not the node's (a live server, real podman, a closed port on 127.0.0.1)."""

from __future__ import annotations

from tests.sandbox import images

from ..conftest import Server


def test_an_image_that_cannot_be_pulled_fails_the_job_not_the_node(server: Server) -> None:
    images.engine()
    ref = "127.0.0.1:9/fairpod-test/missing:1"
    server.submit(name="nopull", team="john", image=ref, command=["true"])
    job = server.wait_state("nopull", "Failed", 120)
    assert job["image"] == ref and job["image_pull_policy"] is None and job["mounts"] == []
    assert job["reason"].startswith(f"replica 0 image pull failed: {ref}: "), job["reason"]
    pulls = [e for e in job["events"] if e["kind"] == "ImagePullFailed"]
    assert len(pulls) == 1 and ref in pulls[0]["message"]
    nodes = server.api("GET", "/nodes").json()["nodes"]
    assert all(n["health_status"] == "Schedulable" and not n["fault_type"] for n in nodes), nodes
