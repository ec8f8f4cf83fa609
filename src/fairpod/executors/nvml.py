"""This host's NVIDIA GPUs: inventory and health readings from NVML (``nvidia-ml-py``), else ``nvidia-smi``.

Three sources, tried in order, and every caller is told which one answered:

1. ``FAIRPOD_FAKE_NVML=<file.json>``: a **FAKE** NVML for tests on machines without GPUs, labelled as such in
   every reading and event (``source: "FAKE NVML (tests only)"``). The file holds ``{"gpus": [{"name": …,
   "uuid": …, "memory_mib": …, optional readings, "mig_devices": [MIG device UUIDs] …}]}``; it is read on every call, so a test can change a
   reading (an XID, a GPU gone) while fairpod runs.
2. NVML through ``pynvml`` (package ``nvidia-ml-py``).
3. ``nvidia-smi --query-gpu`` (fewer readings: no XIDs, no retired pages).

XIDs come from NVML's event stream: the first NVML read in a process starts ``XID_WATCH``, a daemon thread
waiting on an event set registered for critical XID errors on every GPU; each XID it sees is reported once, in
the next reading of that GPU (which fails the health check that reads it).

No source (no driver, no GPU) is an empty list with source ``"none"``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any

FAKE_ENV = "FAIRPOD_FAKE_NVML"
FAKE_SOURCE = "FAKE NVML (tests only)"


@dataclass
class GpuReading:
    index: int
    name: str
    uuid: str = ""
    memory_mib: int = 0
    xid_errors: list[int] = field(default_factory=list)
    ecc_uncorrected: int = 0
    retired_pages: int = 0  # retired plus pending-retirement pages (or remapped rows)
    remap_failure: bool = False  # row remapping failed: the card needs replacing
    temperature_c: float | None = None
    utilization_pct: float | None = None  # GPU busy time over NVML's last sample period
    throttled: bool = False  # a hardware slowdown (thermal, power brake), not an idle clock-down
    throttle_reasons: list[str] = field(default_factory=list)
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    mig_devices: list[str] = field(default_factory=list)  # UUIDs of its MIG devices, in index order (MIG mode on)
    source: str = "nvml"

    def as_event(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, [], "")}


def read_gpus() -> tuple[list[GpuReading], str]:
    """(readings of every GPU of this host, the source that gave them)."""
    fake = os.environ.get(FAKE_ENV)
    if fake:
        return _fake(fake), FAKE_SOURCE
    gpus = _nvml()
    if gpus is not None:
        return gpus, "nvml"
    gpus = _smi()
    if gpus is not None:
        return gpus, "nvidia-smi"
    return [], "none"


def _fake(path: str) -> list[GpuReading]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise RuntimeError(f"{FAKE_ENV}={path}: cannot read the fake NVML file: {e}") from None
    out = []
    for i, g in enumerate(data.get("gpus", [])):
        known = {k: v for k, v in g.items() if k in GpuReading.__dataclass_fields__ and k not in ("index", "source")}
        out.append(GpuReading(index=i, **{"name": "FAKE GPU", **known}, source=FAKE_SOURCE))
    return out


_HW_SLOWDOWN = {  # NVML clock event reasons that mean the hardware slowed the GPU down
    0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
}


def _nvml() -> list[GpuReading] | None:
    try:
        import pynvml  # type: ignore[import-not-found, import-untyped]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver
        return None
    XID_WATCH.start(pynvml)
    out = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            g = GpuReading(i, _text(pynvml.nvmlDeviceGetName(h)))
            g.uuid = _try(lambda h=h: _text(pynvml.nvmlDeviceGetUUID(h)), "")
            g.memory_mib = _try(lambda h=h: int(pynvml.nvmlDeviceGetMemoryInfo(h).total // 2**20), 0)
            g.ecc_uncorrected = _try(lambda h=h: int(pynvml.nvmlDeviceGetTotalEccErrors(
                h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)), 0)
            g.temperature_c = _try(lambda h=h: float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
                                   None)
            g.utilization_pct = _try(lambda h=h: float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu), None)
            reasons = _try(lambda h=h: int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)), 0)
            g.throttle_reasons = [name for bit, name in _HW_SLOWDOWN.items() if reasons & bit]
            g.throttled = bool(g.throttle_reasons)
            g.retired_pages = _retired(pynvml, h)
            remap = _try(lambda h=h: pynvml.nvmlDeviceGetRemappedRows(h), None)  # (corr, unc, pending, failed)
            if remap is not None:
                g.retired_pages += int(remap[1]) + int(remap[2])
                g.remap_failure = bool(remap[3])
            g.pcie_gen = _try(lambda h=h: int(pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h)), None)
            g.pcie_gen_max = _try(lambda h=h: int(pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h)), None)
            g.pcie_width = _try(lambda h=h: int(pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)), None)
            g.pcie_width_max = _try(lambda h=h: int(pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)), None)
            g.xid_errors = XID_WATCH.take(g.uuid)
            g.mig_devices = _mig_devices(pynvml, h)
            out.append(g)
    except Exception:  # a device that stops answering mid-read: report what was read (a GPU fewer)
        pass
    finally:
        _try(pynvml.nvmlShutdown, None)
    return out


def _mig_devices(pynvml: Any, h: Any) -> list[str]:
    """The UUIDs of a GPU's MIG devices (none when MIG mode is off)."""
    if _try(lambda: pynvml.nvmlDeviceGetMigMode(h)[0], 0) != 1:
        return []
    out = []
    for k in range(_try(lambda: int(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)), 0)):
        mh = _try(lambda k=k: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, k), None)
        if mh is not None:
            out.append(_try(lambda mh=mh: _text(pynvml.nvmlDeviceGetUUID(mh)), ""))
    return [u for u in out if u]


class XidWatch:
    """Critical XID events from NVML's event stream, kept per GPU (by UUID) until a reading takes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, list[int]] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def record(self, uuid: str, xid: int) -> None:
        with self._lock:
            self._seen.setdefault(uuid, []).append(xid)

    def take(self, uuid: str) -> list[int]:
        with self._lock:
            return self._seen.pop(uuid, [])

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, pynvml: Any) -> bool:
        """Start watching (once per process); False where NVML has no event support."""
        with self._lock:
            if self._thread is not None:
                return self.running
            try:
                pynvml.nvmlInit()  # the watch's own reference: NVML stays loaded while it waits
                es = pynvml.nvmlEventSetCreate()
                for i in range(pynvml.nvmlDeviceGetCount()):
                    h = pynvml.nvmlDeviceGetHandleByIndex(i)
                    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
            except Exception:  # no event support (e.g. some virtualised GPUs): readings go on without XIDs
                self._thread = threading.Thread()  # not started: never tried again
                return False
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, args=(pynvml, es), name="fairpod-xid-watch",
                                            daemon=True)
            self._thread.start()
            return True

    def _loop(self, pynvml: Any, es: Any) -> None:
        while not self._stop.is_set():  # each wait is bounded by its 500 ms timeout
            try:
                data = pynvml.nvmlEventSetWait(es, 500)
            except Exception:  # NVML_ERROR_TIMEOUT: no event within 500 ms
                continue
            uuid = _try(lambda d=data: _text(pynvml.nvmlDeviceGetUUID(d.device)), "")
            self.record(uuid, int(getattr(data, "eventData", 0)))
        _try(lambda: pynvml.nvmlEventSetFree(es), None)
        _try(pynvml.nvmlShutdown, None)

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t.is_alive():
            t.join(timeout)
        with self._lock:
            self._thread = None


XID_WATCH = XidWatch()


def _retired(pynvml: Any, h: Any) -> int:
    total = 0
    for cause in ("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",
                  "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"):
        if hasattr(pynvml, cause):
            total += len(_try(lambda c=cause: pynvml.nvmlDeviceGetRetiredPages(h, getattr(pynvml, c)), []) or [])
    return total


def _smi() -> list[GpuReading] | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    fields = ("index,name,uuid,memory.total,temperature.gpu,ecc.errors.uncorrected.volatile.total,"
              "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max")
    try:
        res = subprocess.run([smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    out = []
    for line in res.stdout.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 10 or not cells[0].isdigit():
            continue
        out.append(GpuReading(int(cells[0]), cells[1], uuid=cells[2], memory_mib=_int(cells[3]) or 0,
                              temperature_c=_num(cells[4]), ecc_uncorrected=_int(cells[5]) or 0,
                              pcie_gen=_int(cells[6]), pcie_gen_max=_int(cells[7]), pcie_width=_int(cells[8]),
                              pcie_width_max=_int(cells[9]), source="nvidia-smi"))
    return out


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _try(fn: Any, default: Any) -> Any:
    try:
        return fn()
    except Exception:  # NVML raises for readings a board does not support
        return default


def _int(cell: str) -> int | None:
    return int(cell) if cell.isdigit() else None


def _num(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None
