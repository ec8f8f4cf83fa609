"""The monitoring agent's cheap periodic checks and what each finding calls for.

Conditions (as HyperPod names them where it has a name) and their actions:

| condition            | seen when                                        | action  |
|----------------------|--------------------------------------------------|---------|
| HeartbeatLost        | no heartbeat for ``heartbeat_timeout`` seconds   | reboot  |
| DiskPressure         | less than 2 % of the scratch disk free           | reboot  |
| NvidiaErrorReboot    | an XID error or uncorrected ECC errors           | reboot  |
| NvidiaGpuLost        | fewer GPUs than the instance type has            | replace |
| NvidiaErrorReplace   | a failed memory row remap                        | replace |
| MemoryPressure       | less than 2 % of memory available                | none (a warning event) |
| GpuHot               | a GPU above its model's max temperature          | none (a warning event) |

A deep check's failure maps to an action by ``DEEP_CHECK_ACTION``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fairpod.health.probe import Probe

DEEP_CHECK_ACTION = {
    "StressTestFailed": "replace",
    "GpuCountMismatch": "replace",
    "GpuComputeError": "replace",
    "GpuSlow": "replace",
    "GpuUnavailable": "replace",
    "GpuMemorySlow": "replace",
    "NvidiaErrorReplace": "replace",
    "GpuThrottled": "reboot",
    "GpuOverheated": "reboot",
    "NvidiaErrorReboot": "reboot",
    "DiskFailure": "reboot",
    "NetworkFailure": "reboot",
    "NetworkSlow": "reboot",
    "NcclAllReduceFailed": "reboot",
    "GpuInterconnectSlow": "replace",
}


@dataclass
class Finding:
    node: str
    condition: str
    action: str  # reboot | replace | none
    msg: str
    values: dict[str, Any] = field(default_factory=dict)


def agent_check(probe: Probe, last_heartbeat: float | None, now: float, heartbeat_timeout: float,
                disk_min: float = 0.02, memory_min: float = 0.02) -> list[Finding]:
    node = probe.node
    out: list[Finding] = []
    if last_heartbeat is not None and now - last_heartbeat > heartbeat_timeout:
        out.append(Finding(node, "HeartbeatLost", "reboot",
                           f"no heartbeat for {now - last_heartbeat:.1f} s (timeout {heartbeat_timeout:g} s)",
                           {"seconds": round(now - last_heartbeat, 1)}))
    free = probe.disk_free_fraction()
    if free < disk_min:
        out.append(Finding(node, "DiskPressure", "reboot", f"scratch disk {free:.1%} free", {"free": free}))
    mem = probe.memory_available_fraction()
    if mem < memory_min:
        out.append(Finding(node, "MemoryPressure", "none", f"{mem:.1%} of memory available", {"available": mem}))
    if probe.expected_gpus:
        gpus = probe.gpus()
        if len(gpus) < probe.expected_gpus:
            out.append(Finding(node, "NvidiaGpuLost", "replace",
                               f"NVML lists {len(gpus)} GPUs, the instance type has {probe.expected_gpus}",
                               {"found": len(gpus), "expected": probe.expected_gpus}))
        for g in gpus:
            if g.xid_errors or g.ecc_uncorrected:
                out.append(Finding(node, "NvidiaErrorReboot", "reboot",
                                   f"GPU {g.index}: XID {g.xid_errors or '-'}, uncorrected ECC {g.ecc_uncorrected}",
                                   {"gpu": g.index, "xid": g.xid_errors, "ecc": g.ecc_uncorrected}))
            if g.remap_failure:
                out.append(Finding(node, "NvidiaErrorReplace", "replace", f"GPU {g.index}: memory row remap failed",
                                   {"gpu": g.index}))
            if g.temperature_c is not None and g.temperature_c > probe.thresholds.max_temperature_c:
                out.append(Finding(node, "GpuHot", "none", f"GPU {g.index} at {g.temperature_c:.0f} °C",
                                   {"gpu": g.index, "temperature_c": g.temperature_c}))
    return out
