"""Real-GPU mode: detection, device isolation, GPU readings and thresholds.

On machines without GPUs these run against a FAKE NVML (``FAIRPOD_FAKE_NVML``, labelled so in every event);
the ``gpu`` tests need a real NVIDIA GPU with torch and are skipped without one.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.executors.nvml import FAKE_SOURCE
from fairpod.health.checks import instance_stress
from fairpod.health.probe import Probe
from fairpod.model.catalog import gpu_thresholds, match_instance_type

from ..server.conftest import Server, fake_nvml, wait_for

H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "temperature_c": 35.0, "pcie_gen": 5,
        "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16}


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


gpu = pytest.mark.skipif(not _has_cuda(), reason="needs a real NVIDIA GPU and torch with CUDA")


@pytest.mark.parametrize("name,count,vcpu,expected", [
    ("NVIDIA H100 80GB HBM3", 8, 192, "ml.p5.48xlarge"),
    ("NVIDIA H200", 8, 192, "ml.p5e.48xlarge"),
    ("NVIDIA A100-SXM4-40GB", 8, 96, "ml.p4d.24xlarge"),
    ("NVIDIA A100-SXM4-80GB", 8, 96, "ml.p4de.24xlarge"),
    ("NVIDIA A10G", 4, 48, "ml.g5.12xlarge"),
    ("NVIDIA H100 80GB HBM3", 1, 16, None),  # no catalog type has one H100
    ("NVIDIA GeForce RTX 4090", 2, 32, None),
])
def test_the_catalog_types_a_host_by_gpu_model_and_count(name: str, count: int, vcpu: int, expected: str | None):
    found = match_instance_type(name, count, vcpu)
    assert (found.name if found else None) == expected


def test_thresholds_come_from_the_gpu_model():
    assert gpu_thresholds("NVIDIA H100 80GB HBM3").min_matmul_tflops == 400
    assert gpu_thresholds("NVIDIA A10G").min_matmul_tflops == 30
    assert gpu_thresholds("Some Future GPU").min_matmul_tflops == 1.0  # generic floor


def test_the_deep_check_records_every_reading_with_its_threshold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    bad = {**H100, "retired_pages": 80, "temperature_c": 95.0}
    monkeypatch.setenv("FAIRPOD_FAKE_NVML", str(fake_nvml(tmp_path / "nvml.json", [H100, bad])))
    probe = Probe("n0", str(tmp_path), 2, virtual_gpus=False, thresholds=gpu_thresholds(H100["name"]))
    r = instance_stress(probe, seconds=0.2)
    assert not r.passed
    readings = [e for e in r.events if "reading" in e]
    assert len(readings) == 2 and all(e["reading"]["source"] == FAKE_SOURCE for e in readings)
    assert readings[0]["thresholds"]["max_temperature_c"] == 87
    errors = {e["msg"] for e in r.events if e["level"] == "error"}
    assert "GPU 1 has 80 retired memory pages (at most 60)" in errors
    assert "GPU 1 is at 95 °C (at most 87)" in errors
    assert r.fault_type == "NvidiaErrorReplace"


@pytest.fixture
def h100_host(tmp_path: Path) -> Iterator[Server]:
    """``fairpod up`` with no spec on a host whose (FAKE) NVML lists 8 x H100: real-GPU mode."""
    s = Server(tmp_path)
    s.env["FAIRPOD_FAKE_NVML"] = str(fake_nvml(tmp_path / "nvml.json", [dict(H100, uuid=f"GPU-{i}") for i in range(8)]))
    s.start()
    yield s
    s.kill()
    s.kill_replicas()


def _devices(server: Server, job: str) -> tuple[str, str]:
    out = server.cli("get-logs", job).stdout
    cuda = re.search(r"^CUDA=(.*)$", out, re.M)
    nvidia = re.search(r"^NVIDIA=(.*)$", out, re.M)
    assert cuda and nvidia, out
    return cuda.group(1), nvidia.group(1)


def test_up_on_a_gpu_host_gives_each_replica_exactly_its_gpus(h100_host: Server):
    s = h100_host
    cluster = s.cli("cluster", "show").stdout
    assert "ml.p5.48xlarge" in cluster and "NVIDIA H100" in cluster
    show = ["sh", "-c", "echo CUDA=$CUDA_VISIBLE_DEVICES; echo NVIDIA=$NVIDIA_VISIBLE_DEVICES; sleep 3"]
    for name in ("one", "two"):
        s.submit(name=name, team="default", accelerators=1, command=show)
    s.submit(name="whole", team="default", command=show[:2] + ["echo CUDA=$CUDA_VISIBLE_DEVICES; "
                                                                "echo NVIDIA=$NVIDIA_VISIBLE_DEVICES"])
    for name in ("one", "two", "whole"):
        s.wait_state(name, "Succeeded", 60)
    one, two, whole = (_devices(s, n) for n in ("one", "two", "whole"))
    assert one[0] == one[1] and two[0] == two[1] and len(one[0].split(",")) == 1
    assert one[0] != two[0], "two 1-GPU jobs on one node must see different GPUs"
    assert sorted(whole[0].split(",")) == [str(i) for i in range(8)]
    nodes = s.cli("node", "list").stdout
    assert "(real)" in nodes


def test_a_gpu_fault_read_from_nvml_drains_the_node(h100_host: Server, tmp_path: Path):
    """A fault in the (FAKE) NVML readings takes the path an injected fault takes: labelled, drained."""
    s = h100_host
    node = s.api("GET", "/nodes").json()["nodes"][0]["name"]
    wait_for(lambda: s.api("GET", "/nodes").json()["nodes"][0]["health_status"] == "Schedulable", 60, "schedulable")
    gpus = [dict(H100, uuid=f"GPU-{i}") for i in range(8)]
    gpus[3]["remap_failure"] = True
    Path(s.env["FAIRPOD_FAKE_NVML"]).write_text(json.dumps({"gpus": gpus}))
    r = s.cli("node", "check", node)
    assert r.returncode == 0
    nd = wait_for(lambda: (n := s.api("GET", "/nodes").json()["nodes"][0])["fault_type"] and n, 60, "the fault")
    assert nd["fault_type"] in ("NvidiaErrorReplace", "NvidiaGpuLost"), nd
    assert nd["health_status"] != "Schedulable"


@gpu
def test_on_a_real_gpu_host_replicas_see_their_gpu_and_the_deep_check_measures_it(tmp_path: Path):
    s = Server(tmp_path)
    s.env.pop("FAIRPOD_FAKE_NVML")  # this host's real NVML
    s.start()
    try:
        node = s.api("GET", "/nodes").json()["nodes"][0]
        assert node["accelerators_are"] == "gpus"
        count = node["accelerators"]
        probe = ("import os, torch; print('CUDA=' + os.environ['CUDA_VISIBLE_DEVICES']); "
                 "print('NVIDIA=' + os.environ['NVIDIA_VISIBLE_DEVICES']); print('SEEN', torch.cuda.device_count())")
        python = shutil.which("python3") or "python3"
        s.submit(name="one", team="default", accelerators=1, command=[python, "-c", probe])
        s.wait_state("one", "Succeeded", 120)
        out = s.cli("get-logs", "one").stdout
        assert "SEEN 1" in out, out
        cuda, _ = _devices(s, "one")
        assert cuda.isdigit() and int(cuda) < count
        s.cli("node", "check", node["name"])
        checks = wait_for(lambda: [c for c in s.api("GET", f"/nodes/{node['name']}/health").json()["checks"]
                                   if "tflops" in c], 300, "the GEMM reading")
        assert checks[0]["tflops"] >= checks[0]["threshold"] > 1
        health = s.api("GET", f"/nodes/{node['name']}/health").json()["checks"]
        assert any(c.get("memory_gbps") for c in health)
        assert any(c.get("reading", {}).get("source") == "nvml" for c in health)
    finally:
        s.kill()
        s.kill_replicas()


class FakePynvml:
    """A FAKE ``pynvml`` module (tests only): two GPUs, and an event stream that delivers what a test queues."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_TEMPERATURE_GPU = 0
    nvmlEventTypeXidCriticalError = 8

    def __init__(self) -> None:
        import queue

        self.events: queue.Queue = queue.Queue()
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.inits -= 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-fake-{h}"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> object:
        return type("Mem", (), {"total": 80 * 2**30})()

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: int, kind: int, es: str) -> None:
        assert kind == self.nvmlEventTypeXidCriticalError

    def nvmlEventSetWait(self, es: str, timeout_ms: int) -> object:
        import queue

        try:
            gpu, xid = self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise RuntimeError("NVML_ERROR_TIMEOUT") from None
        return type("Event", (), {"device": gpu, "eventData": xid})()

    def nvmlEventSetFree(self, es: str) -> None:
        pass

    def __getattr__(self, name: str) -> object:  # every other reading is unsupported on this fake
        def unsupported(*a: object) -> object:
            raise RuntimeError(f"{name}: not supported")

        return unsupported


def test_xids_from_the_nvml_event_stream_reach_the_next_reading_once(monkeypatch: pytest.MonkeyPatch):
    import sys

    from fairpod.executors import nvml

    fake = FakePynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv(nvml.FAKE_ENV, raising=False)
    watch = nvml.XidWatch()
    monkeypatch.setattr(nvml, "XID_WATCH", watch)
    try:
        gpus, source = nvml.read_gpus()
        assert source == "nvml" and [g.xid_errors for g in gpus] == [[], []]
        assert watch.running
        fake.events.put((1, 79))  # GPU 1 fell off the bus
        fake.events.put((1, 48))  # and had a double-bit ECC error
        wait_for(lambda: len(watch._seen.get("GPU-fake-1", [])) == 2, 10, "the watch to see both XIDs")
        gpus, _ = nvml.read_gpus()
        assert [g.xid_errors for g in gpus] == [[], [79, 48]]
        gpus, _ = nvml.read_gpus()
        assert [g.xid_errors for g in gpus] == [[], []]  # each XID is reported once
    finally:
        watch.stop()
    assert not watch.running


def test_the_all_reduce_check_measures_bus_bandwidth_and_fails_below_the_floor():
    """The node-local all-reduce of the GPU check, run with gloo on two CPU processes (the same harness runs
    NCCL across the GPUs of a real node). One real measurement is judged against a floor below it and one above
    it (the check is measure, then judge_allreduce: a second run would only repeat the first's processes)."""
    pytest.importorskip("torch")
    from fairpod.health.allreduce import measure
    from fairpod.health.checks import CheckResult, judge_allreduce, nccl_allreduce
    from fairpod.model.catalog import GpuThresholds

    got = measure(2, backend="gloo", device="cpu", mib=4, iters=2)
    assert got.get("correct") is True and got["ranks"] == 2 and got["busbw_gbps"] > 0, got
    ok = CheckResult("InstanceStress", "n0", True)
    judge_allreduce(got, 2, GpuThresholds(min_nccl_busbw_gbps=1e-6), ok)
    (ev,) = [e for e in ok.events if "busbw_gbps" in e]
    assert ok.passed and ev["busbw_gbps"] > 0 and ev["threshold"] == 1e-6
    slow = CheckResult("InstanceStress", "n0", True)
    judge_allreduce(got, 2, GpuThresholds(min_nccl_busbw_gbps=99_999), slow)
    assert not slow.passed and slow.fault_type == "GpuInterconnectSlow"
    broken = CheckResult("InstanceStress", "n0", True)
    nccl_allreduce(2, GpuThresholds(), broken, backend="nccl", device="cpu", mib=4, iters=1)  # NCCL needs GPUs
    assert not broken.passed and broken.fault_type == "NcclAllReduceFailed"
