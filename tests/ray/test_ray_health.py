"""Deep health checks on Ray run on the node they judge (a Ray task pinned to it), not on the control plane's
host: each check's events name the Ray node it ran on, and a fault injected on one node is found there."""

from __future__ import annotations

from typing import Any

from ..server.conftest import wait_for
from .conftest import WORKERS, RayServer


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
    wait_for(lambda: _node(ray_server, bad)["deep_health_check"] == "Failed", 90, f"{bad} to fail its check")
    failed = [m for m in _events(ray_server, bad) if "stress" in m.lower() and f"ran on {ids[bad]}" in m]
    assert failed, _events(ray_server, bad)
    assert not _node(ray_server, bad)["schedulable"]
