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
from dataclasses import dataclass, field

FAULT_KINDS = ("xid", "gpu-lost", "heartbeat-lost", "disk-full", "stress-fail")
CLEARED_BY_REBOOT = {"xid", "heartbeat-lost", "disk-full"}


@dataclass
class GpuReading:
    index: int
    name: str
    xid_errors: list[int] = field(default_factory=list)
    ecc_uncorrected: int = 0
    temperature_c: float | None = None
    throttled: bool = False


class Probe:
    """Real readings of the host a node runs on. ``virtual_gpus`` is the slot count of a virtual node."""

    def __init__(self, node: str, scratch: str, expected_gpus: int, virtual_gpus: bool) -> None:
        self.node = node
        self.scratch = scratch
        self.expected_gpus = expected_gpus
        self.virtual_gpus = virtual_gpus
        self.corrupt_compute = False
        self.full_disk = False
        self.heartbeat_stopped = False

    def memory_available_fraction(self) -> float:
        info: dict[str, int] = {}
        with open("/proc/meminfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                info[k] = int(v.split()[0])
        return info.get("MemAvailable", 0) / max(1, info.get("MemTotal", 1))

    def disk_free_fraction(self) -> float:
        if self.full_disk:
            return 0.0
        u = shutil.disk_usage(self.scratch)
        return u.free / u.total

    def write_scratch(self, path: str, data: bytes) -> None:
        if self.full_disk:
            raise OSError(28, "No space left on device (ENOSPC)")
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def gpus(self) -> list[GpuReading]:
        if self.virtual_gpus:
            return [GpuReading(i, "virtual slot") for i in range(self.expected_gpus)]
        return nvml_gpus()


def nvml_gpus() -> list[GpuReading]:
    """NVML readings of this host's NVIDIA GPUs (empty without a driver or nvidia-ml-py)."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver
        return []
    out = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            g = GpuReading(i, name.decode() if isinstance(name, bytes) else str(name))
            try:
                g.ecc_uncorrected = int(pynvml.nvmlDeviceGetTotalEccErrors(
                    h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC))
            except Exception:  # ECC not supported on this board
                g.ecc_uncorrected = 0
            try:
                g.temperature_c = float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU))
            except Exception:
                g.temperature_c = None
            try:
                reasons = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)
                hw = getattr(pynvml, "nvmlClocksThrottleReasonHwSlowdown", 0x8)
                g.throttled = bool(reasons & hw)
            except Exception:
                g.throttled = False
            out.append(g)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return out


class Faulty(Probe):
    """A probe whose readings carry the injected faults ``kinds``."""

    def __init__(self, base: Probe, kinds: set[str]) -> None:
        super().__init__(base.node, base.scratch, base.expected_gpus, base.virtual_gpus)
        self.base = base
        self.kinds = set(kinds)
        self.corrupt_compute = "stress-fail" in kinds
        self.full_disk = "disk-full" in kinds
        self.heartbeat_stopped = "heartbeat-lost" in kinds

    def memory_available_fraction(self) -> float:
        return self.base.memory_available_fraction()

    def gpus(self) -> list[GpuReading]:
        gpus = self.base.gpus()
        if "gpu-lost" in self.kinds and gpus:
            gpus = gpus[:-1]  # the device fell off the bus: NVML no longer lists it
        if "xid" in self.kinds and gpus:
            gpus[0].xid_errors.append(79)  # XID 79: GPU has fallen off the bus / needs a reset
        return gpus
