"""``fairpod up --executor ray``: one clear line for every bad setting, and a background start with the
command-line flags (nodes from Ray, the spec's instance groups not created as nodes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ..server.conftest import free_port, wait_for
from .cluster import RayTestCluster
from .conftest import WORKERS, assert_clean, remove_agents


def fairpod(tmp: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "FAIRPOD_HOME": str(tmp / "home"), "FAIRPOD_CONFIG": str(tmp / "config.json")}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "fairpod.cli.main", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--executor", "ray", "--ray-address", "127.0.0.1:{closed}"], 1,
         "fairpod: error: cannot reach the Ray cluster at 127.0.0.1:{closed}: Connection refused"),
        (["--ray-address", "not-an-address"], 1, "fairpod: error: invalid Ray address 'not-an-address'"),
        (["--executor", "local", "--ray-address", "10.0.0.5:6379"], 2,
         "fairpod: error: --ray-address and --ray-namespace go with --executor ray"),
        (["--ray-address", "127.0.0.1:6379", "--ray-namespace", "Bad_NS"], 1,
         "fairpod: error: invalid Ray namespace 'Bad_NS'"),
    ],
)
def test_bad_ray_settings_give_one_clear_line(tmp_path: Path, args: list[str], code: int, message: str):
    closed = str(free_port())
    args = [a.replace("{closed}", closed) for a in args]
    t0 = time.monotonic()
    r = fairpod(tmp_path, "up", "--port", str(free_port()), "--foreground", *args)
    assert r.returncode == code, r.stderr + r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message.replace("{closed}", closed)), r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert time.monotonic() - t0 < 20


def test_a_spec_with_a_bad_ray_address_is_refused(tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("cluster:\n  executor: {kind: ray, ray_address: 'somewhere'}\n")
    r = fairpod(tmp_path, "validate", str(spec))
    assert r.returncode == 1
    assert "cluster.executor.ray_address: must be auto or HOST:PORT" in r.stdout + r.stderr


def test_help_explains_the_ray_executor(tmp_path: Path):
    out = " ".join(fairpod(tmp_path, "up", "--help").stdout.split())
    assert re.search(r"--executor \{local,[a-z,]*ray", out), out
    for text in ("--ray-address auto|HOST:PORT", "fairpod/instance-type:<type>", "docs/ray.md", "--ray-namespace"):
        assert text in out, text


def test_up_in_the_background_with_the_ray_flags(ray_cluster: RayTestCluster, ray_driver, tmp_path: Path):
    port = free_port()
    ns = f"cli-{uuid.uuid4().hex[:8]}"
    try:  # the up too: one that failed may have started agents, which the finally removes
        # (up waits for the server's start, which waits for an agent on each Ray node: as long as the machine
        # is busy; the bound here is the subprocess's, above FAIRPOD_START_LIMIT's default)
        r = fairpod(tmp_path, "up", "--port", str(port), "--ray-address", ray_cluster.address, "--ray-namespace", ns,
                    timeout=700)
        assert r.returncode == 0, r.stderr + r.stdout
        assert f"nodes from the Ray cluster at {ray_cluster.address} (namespace {ns})" in r.stdout

        def names() -> list[str]:
            out = fairpod(tmp_path, "node", "list", "-o", "json")
            return sorted(n["name"] for n in json.loads(out.stdout)) if out.returncode == 0 else []

        # the Ray nodes, and not the demo spec's workers-0..3 (with Ray, instance groups are no nodes)
        assert wait_for(lambda: names() == WORKERS and names(), 60, "the Ray nodes only") == WORKERS
    finally:
        try:
            d = fairpod(tmp_path, "down")
            assert d.returncode == 0 and "fairpod stopped" in d.stdout, d.stdout + d.stderr
        finally:  # whatever failed: the next Ray test finds every GPU free
            remove_agents(ray_driver, ns)
    assert_clean(ray_driver, ns)
