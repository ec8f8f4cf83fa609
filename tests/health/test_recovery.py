"""Node faults end to end: labelled, drained, recovered, jobs resumed elsewhere (real server and processes)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.server.conftest import Server, wait_for


def _server(tmp_path: Path, recovery: str) -> Server:
    spec = {
        "cluster": {"name": "h", "node_recovery": recovery, "instance_groups": [
            {"name": "gpu", "instance_type": "ml.g5.12xlarge", "count": 4,
             "deep_health_checks": ["InstanceStress", "InstanceConnectivity"],
             "connectivity": {"min_mib_per_s": 5, "max_latency_ms": 500}}]},  # loopback on a busy 2-core box
        "teams": [{"name": "a", "quota": [{"instance_type": "ml.g5.12xlarge", "count": 4}]}],
    }
    f = tmp_path / "spec.yaml"
    f.write_text(yaml.safe_dump(spec))
    s = Server(tmp_path, spec=f)
    s.env.update(FAIRPOD_AGENT_INTERVAL="0.3", FAIRPOD_REBOOT_SECONDS="0.5")
    s.start()
    wait_for(lambda: all(n["deep_health_check"] == "Passed" and n["schedulable"] for n in s.nodes()), 60,
             "every node to pass its deep checks on joining")
    return s


def _nodes(self: Server) -> list[dict]:
    return self.api("GET", "/nodes").json()["nodes"]


Server.nodes = _nodes  # type: ignore[attr-defined]


def _running(tmp_path: Path, recovery: str) -> Iterator[Server]:
    s = _server(tmp_path, recovery)
    yield s
    s.kill(signal.SIGTERM)
    s.kill_replicas()


@pytest.fixture
def auto(tmp_path: Path) -> Iterator[Server]:
    yield from _running(tmp_path, "Automatic")


@pytest.fixture
def manual(tmp_path: Path) -> Iterator[Server]:
    yield from _running(tmp_path, "None")


def _node(s: Server, name: str) -> dict:
    return next(n for n in s.nodes() if n["name"] == name)


def test_fault_labels_drains_recovers_and_the_job_resumes_elsewhere(auto: Server):
    s = auto
    s.submit(name="train", team="a", auto_resume=True, max_retry=2, command=["sleep", "120"])
    job = s.wait_state("train", "Running")
    first = job["placement"][0]
    assert s.cli("node", "inject-fault", first, "--kind", "xid").returncode == 0
    # labelled and drained
    wait_for(lambda: _node(s, first)["fault_type"] == "NvidiaErrorReboot" or
             any(e["kind"] == "NodeFault" for e in s.api("GET", f"/nodes/{first}/health").json()["events"]),
             20, "the fault to be seen")
    moved = wait_for(lambda: (j := s.job("train"))["state"] == "Running" and j["restarts"] == 1 and j, 30,
                     "the job to restart on another node")
    assert moved["placement"][0] != first
    restarting = [e for e in moved["events"] if e["kind"] == "JobRestarting"]
    assert restarting and f"node {first} fault: NvidiaErrorReboot" in restarting[0]["message"]
    # recovered: rebooted, checked again, back in service
    back = wait_for(lambda: (n := _node(s, first))["schedulable"] and n["deep_health_check"] == "Passed" and n,
                    60, "the node to come back")
    assert back["health_status"] == "Schedulable" and back["labels"]["injected_faults"] == []
    kinds = [e["kind"] for e in s.api("GET", f"/nodes/{first}/health").json()["events"]]
    after = kinds[kinds.index("NodeFault"):]
    assert after.index("NodeRebooting") < after.index("NodeRebooted") < after.index("NodeRecovered")
    health = s.cli("node", "health", first, "-o", "json").stdout
    assert "InstanceStress" in health and "InstanceConnectivity" in health


def test_gpu_lost_needs_a_replacement(auto: Server):
    s = auto
    s.cli("node", "inject-fault", "gpu-2", "--kind", "gpu-lost")
    back = wait_for(lambda: (n := _node(s, "gpu-2"))["labels"].get("incarnation") == 1 and n["schedulable"] and n,
                    60, "the node to be replaced and back")
    assert back["deep_health_check"] == "Passed"


def test_a_job_without_retries_fails_with_the_node_fault(auto: Server):
    s = auto
    s.submit(name="once", team="a", command=["sleep", "120"])
    node = s.wait_state("once", "Running")["placement"][0]
    s.cli("node", "inject-fault", node, "--kind", "heartbeat-lost")
    failed = s.wait_state("once", "Failed", 30)
    assert failed["reason"].startswith(f"node {node} fault: HeartbeatLost: no heartbeat for")


def test_node_failing_its_deep_check_never_receives_work_and_none_only_labels(manual: Server):
    s = manual
    s.cli("node", "inject-fault", "gpu-3", "--kind", "stress-fail")
    s.cli("node", "check", "gpu-3")
    bad = wait_for(lambda: (n := _node(s, "gpu-3"))["deep_health_check"] == "Failed" and n, 30, "the check to fail")
    assert bad["health_status"] == "UnschedulablePendingReplacement" and bad["fault_type"] == "StressTestFailed"
    for i in range(4):
        s.submit(name=f"j{i}", team="a", command=["sleep", "30"])
    wait_for(lambda: sum(s.job(f"j{i}")["state"] == "Running" for i in range(4)) == 3, 20, "three jobs to run")
    placed = {s.job(f"j{i}")["placement"][0] for i in range(4) if s.job(f"j{i}")["placement"]}
    assert "gpu-3" not in placed
    waiting = next(s.job(f"j{i}") for i in range(4) if s.job(f"j{i}")["state"] == "Pending")
    assert "waiting for capacity" in waiting["reason"]
    # NodeRecovery None: a fault only labels, nothing is rebooted or replaced
    s.cli("node", "inject-fault", "gpu-0", "--kind", "xid")
    wait_for(lambda: _node(s, "gpu-0")["health_status"] == "UnschedulablePendingReboot", 20, "the label")
    import time

    time.sleep(2)
    assert _node(s, "gpu-0")["health_status"] == "UnschedulablePendingReboot"
    assert _node(s, "gpu-3")["health_status"] == "UnschedulablePendingReplacement"
    kinds = {e["kind"] for n in ("gpu-0", "gpu-3") for e in s.api("GET", f"/nodes/{n}/health").json()["events"]}
    assert not kinds & {"NodeRebooting", "NodeReplaced"}
    # an admin can still reboot by hand
    s.cli("node", "reboot", "gpu-0")
    wait_for(lambda: _node(s, "gpu-0")["schedulable"], 30, "the manual reboot")
