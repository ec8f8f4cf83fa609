"""Readings of one node, real where the hardware is real, and the faults injected into them.

Checks never look at the machine directly: they read a ``Probe``. On this host the probe reads /proc,
statvfs and NVML (when an NVIDIA driver is present); a virtual node (accelerators that are slots) reports its
slots as healthy devices. ``fairpod node inject-fault`` wraps the probe in ``Faulty``, which changes the
readings the way the real fault would, so the checks and the agent classify an injected fault through the
same code as a real one.

Each injected fault lasts until the remedy that would clear it on real hardware: a reboot clears ``xid``,
``heartbeat-lost`` and ``disk-full``; only a replacement clears ``gpu-lost`` and ``stress-fail``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable

from fairpod.executors.nvml import GpuReading, read_gpus
from fairpod.model.catalog import GENERIC_GPU, GpuThresholds

FAULT_KINDS = ("xid", "gpu-lost", "heartbeat-lost", "disk-full", "stress-fail")
CLEARED_BY_REBOOT = {"xid", "heartbeat-lost", "disk-full"}
FRESH = 1.0  # seconds a reading of this host serves every node probed on it (a round probes thousands)
_readings: dict[str, tuple[float, float]] = {}  # what -> (monotonic time read, value)


def _host_reading(what: str, read: Callable[[], float]) -> float:
    """``read()``, or the same reading of this host taken less than ``FRESH`` seconds ago: the nodes of the
    local and timed executors all run here, and a health round read /proc/meminfo once per node."""
    now = time.monotonic()
    hit = _readings.get(what)
    if hit is not None and now - hit[0] < FRESH:
        return hit[1]
    value = read()
    if len(_readings) > 10_000:
        _readings.clear()
    _readings[what] = (now, value)
    return value


def _memory_available_fraction() -> float:
    info: dict[str, int] = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            info[k] = int(v.split()[0])
    return info.get("MemAvailable", 0) / max(1, info.get("MemTotal", 1))


def _disk_free_fraction(path: str) -> float:
    u = shutil.disk_usage(path)
    return u.free / u.total


class Probe:
    """Real readings of the host a node runs on. ``virtual_gpus`` is the slot count of a virtual node."""

    def __init__(self, node: str, scratch: str, expected_gpus: int, virtual_gpus: bool,
                 thresholds: GpuThresholds = GENERIC_GPU) -> None:
        self.node = node
        self.thresholds = thresholds  # what a healthy GPU must measure (catalog, or the spec's override)
        self.gpu_source = "virtual" if virtual_gpus else ""
        self.scratch = scratch
        self.expected_gpus = expected_gpus
        self.virtual_gpus = virtual_gpus
        self.corrupt_compute = False
        self.full_disk = False
        self.heartbeat_stopped = False

    def memory_available_fraction(self) -> float:
        return _host_reading("meminfo", _memory_available_fraction)

    def disk_free_fraction(self) -> float:
        if self.full_disk:
            return 0.0
        return _host_reading(f"disk {self.scratch}", lambda: _disk_free_fraction(self.scratch))

    def write_scratch(self, path: str, data: bytes) -> None:
        if self.full_disk:
            raise OSError(28, "No space left on device (ENOSPC)")
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def gpus(self) -> list[GpuReading]:
        if self.virtual_gpus:
            return [GpuReading(i, "virtual slot", source="virtual") for i in range(self.expected_gpus)]
        gpus, self.gpu_source = read_gpus()
        return gpus


class Faulty(Probe):
    """A probe whose readings carry the injected faults ``kinds``."""

    def __init__(self, base: Probe, kinds: set[str]) -> None:
        super().__init__(base.node, base.scratch, base.expected_gpus, base.virtual_gpus, base.thresholds)
        self.base = base
        self.kinds = set(kinds)
        self.corrupt_compute = "stress-fail" in kinds
        self.full_disk = "disk-full" in kinds
        self.heartbeat_stopped = "heartbeat-lost" in kinds

    def memory_available_fraction(self) -> float:
        return self.base.memory_available_fraction()

    def gpus(self) -> list[GpuReading]:
        gpus = self.base.gpus()
        self.gpu_source = self.base.gpu_source
        if "gpu-lost" in self.kinds and gpus:
            gpus = gpus[:-1]  # the device fell off the bus: NVML no longer lists it
        if "xid" in self.kinds and gpus:
            gpus[0].xid_errors.append(79)  # XID 79: GPU has fallen off the bus / needs a reset
        return gpus
