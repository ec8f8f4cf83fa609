"""A Ray node that fairpod starts (``python -m fairpod.executors.raycluster ray start``) joins even when its
dashboard agent's Python takes longer than Ray's fixed 15 s to start, as on a loaded machine: fairpod gives the
raylet the agent's listen port on its command line (``raycluster.raylet_told_agent_port``), so the raylet waits
for no port file. Without it the raylet aborted ('Timed out waiting for file .../dashboard_agent_listen_port_...')
and ``ray start`` failed. The agent is made slow here by a ``sitecustomize`` on its ``PYTHONPATH`` that sleeps
20 s in the agent's process only (every other Ray process starts as usual)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from fairpod.executors import raycluster
from tests import reaper

from .helpers import stop_groups

pytest.importorskip("ray")

SLOW = 17  # seconds the agent sleeps before it starts: past Ray's 15 s

SITECUSTOMIZE = f"""
import sys, time
if any(a.endswith("dashboard/agent.py") for a in sys.argv[:1]):
    time.sleep({SLOW})
"""


@pytest.mark.timeout(300)
def test_a_node_whose_agent_starts_slowly_still_joins(tmp_path: Path) -> None:
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(SITECUSTOMIZE)
    temp = Path(tempfile.mkdtemp(prefix="fpslow-", dir="/tmp"))  # Ray's socket paths must stay short
    port = raycluster._free_ports(1)[0]
    ports, metrics = raycluster._ports(True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(slow), os.environ.get("PYTHONPATH", "")]),
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "AUTOSCALER_METRIC_PORT": metrics}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "fairpod.executors.raycluster", "ray", "start", "--block", "--head",
           "--port", str(port), "--node-ip-address", "127.0.0.1", "--include-dashboard", "false",
           "--include-log-monitor", "false", "--num-cpus", "1", "--temp-dir", str(temp), *ports]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, text=True)
    reaper.started(proc.pid)
    try:
        from ray._raylet import GcsClient

        deadline = time.monotonic() + 240  # a bound: the node joins (or ray start exits) long before
        alive = False
        while not alive and proc.poll() is None and time.monotonic() < deadline:
            try:
                infos = GcsClient(address=f"127.0.0.1:{port}").get_all_node_info(timeout=5)
                alive = any(i.state == 0 for i in infos.values())
            except Exception:  # noqa: BLE001 - GCS not up yet
                pass
            time.sleep(0.5)
        def raylet_log() -> str:
            return "".join(p.read_text(errors="replace") for p in temp.glob("session_*/logs/raylet.out"))

        assert alive, f"the node did not join (ray start: {proc.poll()}):\n{raylet_log()[-3000:]}"
        # then the slow agent starts (its log appears once its Python runs, after SLOW s), and the node still stands
        while not list(temp.glob("session_*/logs/dashboard_agent.log")) and time.monotonic() < deadline:
            assert proc.poll() is None, f"ray start ended:\n{raylet_log()[-3000:]}"
            time.sleep(0.5)
        assert list(temp.glob("session_*/logs/dashboard_agent.log")), "the agent never started"
        assert "Timed out waiting for file" not in raylet_log(), raylet_log()[-3000:]
        assert proc.poll() is None, "ray start ended"  # the raylet did not abort: the node stands
    finally:
        stop_groups([proc], grace=30)
        subprocess.run(["rm", "-rf", str(temp)], check=False)
