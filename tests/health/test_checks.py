"""Deep checks and agent findings on real readings of this host, with and without injected faults."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairpod.health.agent import agent_check
from fairpod.health.checks import instance_connectivity, instance_stress
from fairpod.health.probe import Faulty, Probe


@pytest.fixture
def probe(tmp_path: Path) -> Probe:
    return Probe("n1", str(tmp_path), 4, virtual_gpus=True)


def test_stress_passes_on_a_healthy_node_with_measured_values(probe):
    r = instance_stress(probe, seconds=1)
    assert r.passed and r.fault_type is None
    by_msg = {e["msg"]: e for e in r.events}
    assert by_msg["CPU stress verified"]["hashes_per_second"] > 1000
    assert by_msg["disk write/read verified"]["write_mib_per_s"] > 0
    assert all({"level", "ts", "node", "check", "msg"} <= set(e) for e in r.events)


@pytest.mark.parametrize(
    "fault, fault_type",
    [("stress-fail", "StressTestFailed"), ("gpu-lost", "GpuCountMismatch"), ("xid", "NvidiaErrorReboot"),
     ("disk-full", "DiskFailure")],
)
def test_stress_fails_on_injected_faults(probe, fault, fault_type):
    r = instance_stress(Faulty(probe, {fault}), seconds=1)
    assert not r.passed and r.fault_type == fault_type
    assert any(e["level"] == "error" for e in r.events)


@pytest.mark.parametrize(
    "fault, condition, action",
    [("xid", "NvidiaErrorReboot", "reboot"), ("gpu-lost", "NvidiaGpuLost", "replace"),
     ("disk-full", "DiskPressure", "reboot")],
)
def test_agent_findings(probe, fault, condition, action):
    assert agent_check(probe, 100.0, 101.0, 5.0) == []
    (f,) = agent_check(Faulty(probe, {fault}), 100.0, 101.0, 5.0)
    assert (f.condition, f.action) == (condition, action)


def test_agent_sees_a_lost_heartbeat(probe):
    (f,) = agent_check(probe, 100.0, 110.0, 5.0)
    assert f.condition == "HeartbeatLost" and f.action == "reboot"


def test_ring_connectivity_measures_bandwidth_and_latency():
    # floors any loaded machine meets (the defaults, 50 MiB/s and 20 ms, are for a node, not a busy test run)
    results = instance_connectivity(["a", "b", "c"], mib=4, min_mib_per_s=1, max_latency_ms=2000)
    assert all(r.passed for r in results), [r.events for r in results]
    for r in results:
        (e,) = r.events
        assert e["mib_per_s"] > 0 and e["latency_ms"] >= 0
    slow = instance_connectivity(["a", "b"], mib=4, min_mib_per_s=1e9)
    assert not any(r.passed for r in slow) and slow[0].fault_type == "NetworkSlow"
