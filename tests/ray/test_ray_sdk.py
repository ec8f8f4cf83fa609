"""The SDK from a replica on a Ray node other than the head: it reports to the control plane's advertised
address (``fairpod up --advertise-address``), never to 127.0.0.1, where nothing of fairpod listens for it."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

from .cluster import HEAD_IP, NET, RayTestCluster
from .conftest import WORKERS, RayServer, all_gpus_free, assert_clean, remove_agents

CONTROL_PLANE = f"{NET}.30"  # the control plane's own "host", neither the head's nor a worker's

REPORT = """
import os
from fairpod import sdk
print("url", os.environ["FAIRPOD_API_URL"], flush=True)
assert sdk.report_progress(step=11, checkpoint="ckpt-11", strict=True)
print("reported", flush=True)
"""


def test_sdk_progress_from_a_worker_node_reaches_the_advertised_control_plane(
    ray_cluster: RayTestCluster, ray_driver: Any, tmp_path: Path
) -> None:
    all_gpus_free(ray_driver)
    s = RayServer(tmp_path, ray_cluster)
    s.extra = ["--advertise-address", CONTROL_PLANE]
    script = tmp_path / "report.py"
    script.write_text(REPORT)
    s.start()
    try:
        s.submit(name="rep", team="john", command=[sys.executable, str(script)])
        done = s.wait_state("rep", "Succeeded", 60)
        node = done["placement"][0]
        assert node in WORKERS and ray_cluster.ips[node] not in (HEAD_IP, "127.0.0.1")
        out = s.cli("get-logs", "rep").stdout
        assert f"url http://{CONTROL_PLANE}:{s.port}" in out and "reported" in out
        job = s.job("rep")
        assert job["checkpoint"]["step"] == 11 and job["checkpoint"]["path"].endswith("ckpt-11")
        assert_clean(ray_driver, s.namespace)
    finally:
        s.kill(signal.SIGTERM)
        remove_agents(ray_driver, s.namespace, s.node_dir)
