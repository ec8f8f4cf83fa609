"""Health checks run on the node they judge: with an executor that can run a function on a node
(``run_on_node``: the Ray executor, in the node's agent), :class:`~fairpod.health.manager.HealthManager` sends
:func:`stress_on_node` (deep checks) and :func:`monitor_on_node` (the monitoring agent's periodic checks)
there, so the readings are that node's own. Every event says where it ran (``ran_on``:
the Ray node id, else the host name)."""

from __future__ import annotations

import os
import socket
import tempfile

from fairpod.health import checks
from fairpod.health.agent import Finding, agent_check
from fairpod.health.probe import Faulty, Probe
from fairpod.model.catalog import GpuThresholds


def where() -> str:
    """The Ray node id of this process when it runs in a Ray worker, else this host's name."""
    node_id = os.environ.get("FAIRPOD_RAY_NODE_ID")
    if not node_id:
        try:
            import ray

            if ray.is_initialized():
                node_id = ray.get_runtime_context().get_node_id()
        except Exception:  # noqa: BLE001 - not in Ray: the host name
            node_id = None
    return node_id or socket.gethostname()


def stress_on_node(node: str, gpus: int, virtual_gpus: bool, faults: list[str], seconds: float) -> checks.CheckResult:
    """InstanceStress on this machine (scratch in its temp dir), with the node's injected faults."""
    scratch = os.path.join(tempfile.gettempdir(), "fairpod-health")
    os.makedirs(scratch, exist_ok=True)
    probe: Probe = Probe(node, scratch, gpus, virtual_gpus=virtual_gpus)
    if faults:
        probe = Faulty(probe, set(faults))
    result = checks.instance_stress(probe, seconds=seconds)
    here = where()
    for e in result.events:
        e["ran_on"] = here
        e["msg"] = f"{e['msg']} (ran on {here})"
    return result


def monitor_on_node(node: str, gpus: int, virtual_gpus: bool, thresholds: GpuThresholds, faults: list[str],
                    last_heartbeat: float | None, now: float, heartbeat_timeout: float) -> tuple[bool, list[Finding]]:
    """The monitoring agent's periodic checks on this machine, with the node's injected faults: whether the
    node's heartbeat came, and the findings (each says where it ran)."""
    probe: Probe = Probe(node, tempfile.gettempdir(), gpus, virtual_gpus=virtual_gpus, thresholds=thresholds)
    if faults:
        probe = Faulty(probe, set(faults))
    beat = not probe.heartbeat_stopped
    findings = agent_check(probe, now if beat else last_heartbeat, now, heartbeat_timeout)
    here = where()
    for f in findings:
        f.msg += f" (ran on {here})"
        f.values["ran_on"] = here
    return beat, findings
