"""Deep health checks, bounded in time, each writing structured JSON events.

- InstanceStress: CPU stress with a verified answer (a wrong answer fails), memory stress (a pattern is
  written and read back), disk write/read (checksummed), and on GPU nodes: the GPU count matches the
  instance type; NVML readings (XID, uncorrected ECC, retired pages / row-remap failures, hardware
  slowdowns, temperature, PCIe link) within the GPU model's thresholds (docs/health.md); and on every GPU a
  verified bf16 matrix multiply and a device-memory copy at least as fast as the model's floors (torch).
- InstanceConnectivity: the nodes of a group pass data around a ring over TCP; bandwidth and latency are
  compared with the group's thresholds.
Every event is ``{level, ts, node, check, msg, ...measured values}``.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fairpod.executors.nvml import FAKE_SOURCE
from fairpod.health.probe import Probe
from fairpod.model.catalog import GpuThresholds

Event = dict[str, Any]


@dataclass
class CheckResult:
    check: str
    node: str
    passed: bool
    events: list[Event] = field(default_factory=list)
    fault_type: str | None = None  # the condition a failure calls for

    def log(self, level: str, msg: str, **values: Any) -> None:
        self.events.append({"level": level, "ts": time.time(), "node": self.node, "check": self.check,
                            "msg": msg, **values})

    def fail(self, fault: str, msg: str, **values: Any) -> None:
        self.passed = False
        self.fault_type = self.fault_type or fault
        self.log("error", msg, **values)


def _cpu_work(rounds: int, corrupt: bool) -> str:
    """A hash chain; its answer is checked against an independent second run."""
    h = b"fairpod"
    for _ in range(rounds):
        h = hashlib.sha256(h).digest()
    if corrupt:  # what a bad core or a flipped bit does to a result
        h = bytes([h[0] ^ 1]) + h[1:]
    return h.hex()


def instance_stress(probe: Probe, *, seconds: float = 2.0, memory_mib: int = 64, disk_mib: int = 16) -> CheckResult:
    r = CheckResult("InstanceStress", probe.node, True)
    deadline = time.monotonic() + seconds
    # CPU: the same chain computed twice must agree, and agree with a reference computed once here
    t0 = time.perf_counter()
    rounds = 50_000
    reference = _cpu_work(rounds, False)
    got = _cpu_work(rounds, probe.corrupt_compute)
    dt = time.perf_counter() - t0
    if got != reference:
        r.fail("StressTestFailed", "CPU stress gave a wrong answer", expected=reference[:16], got=got[:16])
    else:
        r.log("info", "CPU stress verified", hashes_per_second=round(2 * rounds / dt))
    # memory: write a pattern, read it back
    if time.monotonic() < deadline:
        n = memory_mib * 2**20
        buf = bytearray(n)
        pattern = bytes(range(256)) * 4096
        for off in range(0, n, len(pattern)):
            buf[off:off + len(pattern)] = pattern
        ok = all(buf[off:off + len(pattern)] == pattern for off in range(0, n, len(pattern)))
        if not ok or probe.corrupt_compute:
            r.fail("StressTestFailed", "memory pattern did not read back", mib=memory_mib)
        else:
            r.log("info", "memory pattern verified", mib=memory_mib)
        del buf
    # disk: write, fsync, read back, compare checksums
    path = os.path.join(probe.scratch, f".fairpod-health-{probe.node}-{os.getpid()}")
    data = os.urandom(disk_mib * 2**20)
    try:
        t0 = time.perf_counter()
        probe.write_scratch(path, data)
        wt = time.perf_counter() - t0
        with open(path, "rb") as f:
            back = f.read()
        if hashlib.sha256(back).digest() != hashlib.sha256(data).digest():
            r.fail("DiskFailure", "disk read-back does not match what was written", mib=disk_mib)
        else:
            r.log("info", "disk write/read verified", mib=disk_mib, write_mib_per_s=round(disk_mib / max(wt, 1e-6)))
    except OSError as e:
        r.fail("DiskFailure", f"disk write failed: {e.strerror or e}", mib=disk_mib)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    _gpu_checks(probe, r)
    return r


def _gpu_checks(probe: Probe, r: CheckResult) -> None:
    """Every reading of every GPU is logged with its threshold; a reading past it fails the check."""
    if probe.expected_gpus == 0:
        return
    th = probe.thresholds
    gpus = probe.gpus()
    if len(gpus) != probe.expected_gpus:
        r.fail("GpuCountMismatch", f"found {len(gpus)} GPUs, the instance type has {probe.expected_gpus}",
               found=len(gpus), expected=probe.expected_gpus, source=probe.gpu_source)
        return
    for g in gpus:
        r.log("info", f"GPU {g.index} ({g.name}) readings", gpu=g.index, reading=g.as_event(),
              thresholds={"max_temperature_c": th.max_temperature_c, "max_retired_pages": th.max_retired_pages})
        if g.xid_errors:
            r.fail("NvidiaErrorReboot", f"GPU {g.index} reports XID errors {g.xid_errors}", gpu=g.index,
                   xid=g.xid_errors)
        if g.ecc_uncorrected:
            r.fail("NvidiaErrorReboot", f"GPU {g.index} has {g.ecc_uncorrected} uncorrected ECC errors",
                   gpu=g.index, ecc=g.ecc_uncorrected)
        if g.remap_failure:
            r.fail("NvidiaErrorReplace", f"GPU {g.index} failed to remap a memory row", gpu=g.index)
        if g.retired_pages > th.max_retired_pages:
            r.fail("NvidiaErrorReplace", f"GPU {g.index} has {g.retired_pages} retired memory pages "
                   f"(at most {th.max_retired_pages})", gpu=g.index, retired_pages=g.retired_pages,
                   threshold=th.max_retired_pages)
        if g.temperature_c is not None and g.temperature_c > th.max_temperature_c:
            r.fail("GpuOverheated", f"GPU {g.index} is at {g.temperature_c:g} °C (at most {th.max_temperature_c:g})",
                   gpu=g.index, temperature_c=g.temperature_c, threshold=th.max_temperature_c)
        if g.throttled:
            r.fail("GpuThrottled", f"GPU {g.index} is slowed down by the hardware ({', '.join(g.throttle_reasons)})",
                   gpu=g.index, reasons=g.throttle_reasons)
        if g.pcie_width and g.pcie_width_max and g.pcie_width < g.pcie_width_max:
            r.log("warning", f"GPU {g.index} PCIe link runs x{g.pcie_width} of x{g.pcie_width_max}", gpu=g.index,
                  pcie_width=g.pcie_width, pcie_width_max=g.pcie_width_max)
    if r.passed:
        r.log("info", f"{len(gpus)} GPUs present, no XID/ECC/retired-page errors", gpus=len(gpus),
              virtual=probe.virtual_gpus, source=probe.gpu_source)
    if not probe.virtual_gpus and probe.gpu_source != FAKE_SOURCE:
        _gpu_burn(len(gpus), th, r)


def _gpu_burn(count: int, th: GpuThresholds, r: CheckResult) -> None:
    """On every GPU: a verified bf16 matrix multiply against the TFLOP/s floor and a device-to-device copy
    against the memory-bandwidth floor (both with torch)."""
    try:
        import torch
    except ImportError:
        r.log("warning", "torch is not installed: GPU matrix multiply and bandwidth test skipped")
        return
    if not torch.cuda.is_available() or torch.cuda.device_count() < count:
        r.fail("GpuUnavailable", f"CUDA sees {torch.cuda.device_count() if torch.cuda.is_available() else 0} "
               f"usable GPUs of {count}")
        return
    for i in range(count):
        dev = torch.device("cuda", i)
        tflops, err = _matmul(torch, dev)
        if err > 2e-2:
            r.fail("GpuComputeError", f"GPU {i} matrix multiply is wrong (relative error {err:.2e})", gpu=i,
                   error=err)
        elif tflops < th.min_matmul_tflops:
            r.fail("GpuSlow", f"GPU {i} multiplies at {tflops:.1f} TFLOP/s (at least {th.min_matmul_tflops:g})",
                   gpu=i, tflops=round(tflops, 1), threshold=th.min_matmul_tflops)
        else:
            r.log("info", f"GPU {i} matrix multiply verified at {tflops:.1f} TFLOP/s", gpu=i,
                  tflops=round(tflops, 1), threshold=th.min_matmul_tflops)
        gbps = _bandwidth(torch, dev)
        if gbps < th.min_memory_gbps:
            r.fail("GpuMemorySlow", f"GPU {i} copies memory at {gbps:.0f} GB/s (at least {th.min_memory_gbps:g})",
                   gpu=i, memory_gbps=round(gbps), threshold=th.min_memory_gbps)
        else:
            r.log("info", f"GPU {i} memory bandwidth {gbps:.0f} GB/s", gpu=i, memory_gbps=round(gbps),
                  threshold=th.min_memory_gbps)
    if count >= 2:
        nccl_allreduce(count, th, r)


def nccl_allreduce(count: int, th: GpuThresholds, r: CheckResult, **kw: Any) -> None:
    """All-reduce bus bandwidth across the node's ``count`` GPUs against the model's floor
    (``fairpod.health.allreduce``; ``kw`` for tests: backend/device/mib)."""
    from fairpod.health.allreduce import measure

    judge_allreduce(measure(count, **kw), count, th, r)


def judge_allreduce(got: dict[str, Any], count: int, th: GpuThresholds, r: CheckResult) -> None:
    """One all-reduce reading (``fairpod.health.allreduce.measure``) against the model's floor."""
    if "error" in got:
        r.fail("NcclAllReduceFailed", f"all-reduce across {count} GPUs: {got['error']}", gpus=count)
    elif not got.get("correct"):
        r.fail("NcclAllReduceFailed", f"all-reduce across {count} GPUs gave a wrong sum", gpus=count)
    elif got["busbw_gbps"] < th.min_nccl_busbw_gbps:
        r.fail("GpuInterconnectSlow", f"all-reduce bus bandwidth {got['busbw_gbps']:.1f} GB/s across {count} GPUs "
               f"(at least {th.min_nccl_busbw_gbps:g})", gpus=count, busbw_gbps=round(got["busbw_gbps"], 1),
               threshold=th.min_nccl_busbw_gbps)
    else:
        r.log("info", f"all-reduce bus bandwidth {got['busbw_gbps']:.1f} GB/s across {count} GPUs", gpus=count,
              busbw_gbps=round(got["busbw_gbps"], 1), threshold=th.min_nccl_busbw_gbps)


def _matmul(torch: Any, dev: Any, n: int = 8192, reps: int = 10) -> tuple[float, float]:
    """(TFLOP/s of a bf16 n×n×n product, relative error of a row block against float64)."""
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        c = a @ b
    torch.cuda.synchronize(dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        c = a @ b
    end.record()
    torch.cuda.synchronize(dev)
    tflops = reps * 2 * n**3 / (start.elapsed_time(end) / 1e3) / 1e12
    ref = a[:64].double() @ b.double()
    err = (c[:64].double() - ref).abs().max().item() / max(1e-6, ref.abs().max().item())
    return tflops, err


def _bandwidth(torch: Any, dev: Any, mib: int = 1024, reps: int = 10) -> float:
    """GB/s of device-to-device copies (bytes read plus bytes written)."""
    src = torch.empty(mib * 2**20, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize(dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize(dev)
    return 2 * reps * src.numel() / (start.elapsed_time(end) / 1e3) / 1e9


def instance_connectivity(nodes: list[str], *, mib: int = 8, min_mib_per_s: float = 50.0,
                          max_latency_ms: float = 20.0, timeout: float = 10.0,
                          endpoint: Callable[[str], str] = lambda _n: "127.0.0.1") -> list[CheckResult]:
    """Pass ``mib`` MiB around the ring of ``nodes`` over TCP; one result per node (its outgoing link)."""
    results = {n: CheckResult("InstanceConnectivity", n, True) for n in nodes}
    if len(nodes) < 2:
        for res in results.values():
            res.log("info", "single-node group: nothing to exchange")
        return list(results.values())
    payload = os.urandom(mib * 2**20)
    digest = hashlib.sha256(payload).digest()
    servers = []
    got: dict[str, bytes] = {}
    for n in nodes:
        s = socket.socket()
        s.bind((endpoint(n), 0))
        s.listen(1)
        s.settimeout(timeout)
        servers.append(s)

    def receive(n: str, s: socket.socket) -> None:
        try:
            conn, _ = s.accept()
            conn.settimeout(timeout)
            h = hashlib.sha256()
            while True:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                if chunk == b"P":  # latency ping
                    conn.sendall(b"P")
                    continue
                h.update(chunk)
            got[n] = h.digest()
            conn.close()
        except OSError:
            pass

    threads = [threading.Thread(target=receive, args=(n, s), daemon=True) for n, s in zip(nodes, servers, strict=True)]
    for t in threads:
        t.start()
    for i, n in enumerate(nodes):
        nxt = (i + 1) % len(nodes)
        res = results[n]
        try:
            with socket.create_connection(servers[nxt].getsockname(), timeout=timeout) as c:
                t0 = time.perf_counter()
                c.sendall(b"P")
                c.recv(1)
                lat = (time.perf_counter() - t0) * 1000
                t0 = time.perf_counter()
                c.sendall(payload)
                c.shutdown(socket.SHUT_WR)
                threads[nxt].join(timeout)
                dt = time.perf_counter() - t0
            bw = mib / max(dt, 1e-6)
            vals = {"peer": nodes[nxt], "mib_per_s": round(bw, 1), "latency_ms": round(lat, 3)}
            if got.get(nodes[nxt]) != digest:
                res.fail("NetworkFailure", f"data sent to {nodes[nxt]} arrived corrupted or incomplete", **vals)
            elif bw < min_mib_per_s:
                res.fail("NetworkSlow", f"link to {nodes[nxt]} at {bw:.0f} MiB/s, below {min_mib_per_s:g}", **vals)
            elif lat > max_latency_ms:
                res.fail("NetworkSlow", f"latency to {nodes[nxt]} {lat:.2f} ms, above {max_latency_ms:g}", **vals)
            else:
                res.log("info", f"ring link to {nodes[nxt]} ok", **vals)
        except OSError as e:
            res.fail("NetworkFailure", f"cannot reach {nodes[nxt]}: {e}", peer=nodes[nxt])
    for s in servers:
        s.close()
    return list(results.values())
