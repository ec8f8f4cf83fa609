"""Health checks on Ray run on the node they judge (in its fairpod agent), not on the control plane's host: deep
checks and the monitoring agent's periodic checks name the Ray node they ran on, and a fault injected on one
node (a failing stress test, an XID) is found there."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from ..server.conftest import wait_for
from .cluster import RayTestCluster
from .conftest import WORKERS, RayServer, all_gpus_free, remove_agents


def _events(s: RayServer, node: str) -> list[str]:
    r = s.api("GET", "/events", params={"limit": 1000})
    assert r.status_code == 200, r.text
    return [e["message"] for e in r.json()["events"] if e["node"] == node]


def _node(s: RayServer, name: str) -> dict[str, Any]:
    return s.nodes()[name]


def test_deep_checks_run_on_their_own_node_and_find_its_fault(ray_server: RayServer):
    good, bad = WORKERS[0], WORKERS[1]
    ids = {w: ray_server.cluster.nodes[w].node_id for w in (good, bad)}
    wait_for(lambda: {good, bad} <= set(ray_server.nodes()), 30, "the Ray nodes to join fairpod")
    assert ray_server.cli("node", "check", good).returncode == 0
    wait_for(lambda: any(f"ran on {ids[good]}" in m for m in _events(ray_server, good)), 90,
             f"a check that ran on {good}")
    assert not any(f"ran on {ids[bad]}" in m for m in _events(ray_server, good))
    wait_for(lambda: _node(ray_server, good)["deep_health_check"] == "Passed", 60, f"{good} to pass")

    assert ray_server.cli("node", "inject-fault", bad, "--kind", "stress-fail").returncode == 0
    assert ray_server.cli("node", "check", bad).returncode == 0
    # the events, not the node's state: with automatic recovery the failed node is replaced within a second
    # (its Failed state can end between two polls on a loaded machine)
    failed = wait_for(lambda: [m for m in _events(ray_server, bad) if "StressTestFailed" in m and "stress" in m
                               and f"ran on {ids[bad]}" in m], 90, f"{bad} to fail its check")
    assert "deep health check failed" in failed[0], failed
    wait_for(lambda: any("replaces it" in m for m in _events(ray_server, bad)), 30, f"{bad} to be taken out and replaced")


def test_the_monitoring_checks_run_on_their_own_node_and_find_an_injected_xid(
    ray_cluster: RayTestCluster, ray_driver: Any, tmp_path: Path
) -> None:
    all_gpus_free(ray_driver)
    s = RayServer(tmp_path, ray_cluster)
    s.env["FAIRPOD_AGENT_INTERVAL"] = "1"
    good, bad = WORKERS[2], WORKERS[3]
    ids = {w: ray_cluster.nodes[w].node_id for w in (good, bad)}
    s.start()
    try:
        wait_for(lambda: {good, bad} <= set(s.nodes()), 30, "the Ray nodes to join fairpod")
        assert s.cli("node", "inject-fault", bad, "--kind", "xid").returncode == 0

        def faults() -> list[dict[str, Any]]:
            items = s.api("GET", "/events", params={"limit": 1000}).json()["events"]
            return [e for e in items if e["kind"] == "NodeFault"]

        found = wait_for(lambda: [e for e in faults() if e["node"] == bad], 30, f"the XID on {bad} to be found")
        assert "NvidiaErrorReboot" in found[0]["message"] and f"(ran on {ids[bad]})" in found[0]["message"], found
        assert not [e for e in faults() if e["node"] == good]
    finally:
        s.kill(signal.SIGTERM)
        remove_agents(ray_driver, s.namespace, s.node_dir)
