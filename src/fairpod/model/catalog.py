"""Built-in catalog of instance types (public AWS figures: accelerators, vCPU, memory in GiB)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field


class InstanceType(BaseModel):
    """One kind of machine: how many accelerators, vCPUs and GiB of memory a node of it has."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    accelerators: int = Field(ge=0, le=1024)
    vcpu: float = Field(gt=0, le=100_000)
    memory_gib: float = Field(gt=0, le=1_000_000)
    accelerator_kind: str | None = None


def _t(name: str, acc: int, vcpu: float, mem: float, kind: str | None = None) -> InstanceType:
    return InstanceType(name=name, accelerators=acc, vcpu=vcpu, memory_gib=mem, accelerator_kind=kind)


_ROWS: list[InstanceType] = [
    _t("ml.g5.xlarge", 1, 4, 16, "NVIDIA A10G"),
    _t("ml.g5.2xlarge", 1, 8, 32, "NVIDIA A10G"),
    _t("ml.g5.4xlarge", 1, 16, 64, "NVIDIA A10G"),
    _t("ml.g5.8xlarge", 1, 32, 128, "NVIDIA A10G"),
    _t("ml.g5.12xlarge", 4, 48, 192, "NVIDIA A10G"),
    _t("ml.g5.16xlarge", 1, 64, 256, "NVIDIA A10G"),
    _t("ml.g5.24xlarge", 4, 96, 384, "NVIDIA A10G"),
    _t("ml.g5.48xlarge", 8, 192, 768, "NVIDIA A10G"),
    _t("ml.g6.xlarge", 1, 4, 16, "NVIDIA L4"),
    _t("ml.g6.12xlarge", 4, 48, 192, "NVIDIA L4"),
    _t("ml.g6.48xlarge", 8, 192, 768, "NVIDIA L4"),
    _t("ml.p4d.24xlarge", 8, 96, 1152, "NVIDIA A100 40GB"),
    _t("ml.p4de.24xlarge", 8, 96, 1152, "NVIDIA A100 80GB"),
    _t("ml.p5.48xlarge", 8, 192, 2048, "NVIDIA H100"),
    _t("ml.p5e.48xlarge", 8, 192, 2048, "NVIDIA H200"),
    _t("ml.p5en.48xlarge", 8, 192, 2048, "NVIDIA H200"),
    _t("ml.trn1.2xlarge", 1, 8, 32, "AWS Trainium"),
    _t("ml.trn1.32xlarge", 16, 128, 512, "AWS Trainium"),
    _t("ml.trn1n.32xlarge", 16, 128, 512, "AWS Trainium"),
    _t("ml.c5.large", 0, 2, 4),
    _t("ml.c5.xlarge", 0, 4, 8),
    _t("ml.c5.2xlarge", 0, 8, 16),
    _t("ml.c5.4xlarge", 0, 16, 32),
    _t("ml.c5.9xlarge", 0, 36, 72),
    _t("ml.c5.12xlarge", 0, 48, 96),
    _t("ml.c5.18xlarge", 0, 72, 144),
    _t("ml.c5.24xlarge", 0, 96, 192),
    _t("ml.m5.large", 0, 2, 8),
    _t("ml.m5.xlarge", 0, 4, 16),
    _t("ml.m5.2xlarge", 0, 8, 32),
    _t("ml.m5.4xlarge", 0, 16, 64),
    _t("ml.m5.8xlarge", 0, 32, 128),
    _t("ml.m5.12xlarge", 0, 48, 192),
    _t("ml.m5.16xlarge", 0, 64, 256),
    _t("ml.m5.24xlarge", 0, 96, 384),
]

BUILTIN_INSTANCE_TYPES: dict[str, InstanceType] = {t.name: t for t in _ROWS}

# MIG profiles per GPU model (NVIDIA's MIG user guide), named as HyperPod names accelerator partitions: profile ->
# how many instances of it one GPU holds when the GPU is split into that profile only (its legal layout: e.g.
# mig-3g.40gb at memory slices 0 and 4 of 8, mig-2g.20gb at 0, 2 and 4)
_MIG_80GB = {"mig-1g.10gb": 7, "mig-1g.20gb": 4, "mig-2g.20gb": 3, "mig-3g.40gb": 2, "mig-4g.40gb": 1, "mig-7g.80gb": 1}
MIG_PROFILES: dict[str, dict[str, int]] = {
    "NVIDIA A100 40GB": {"mig-1g.5gb": 7, "mig-1g.10gb": 4, "mig-2g.10gb": 3, "mig-3g.20gb": 2, "mig-4g.20gb": 1,
                         "mig-7g.40gb": 1},
    "NVIDIA A100 80GB": _MIG_80GB,
    "NVIDIA H100": _MIG_80GB,
    "NVIDIA H200": {"mig-1g.18gb": 7, "mig-1g.35gb": 4, "mig-2g.35gb": 3, "mig-3g.71gb": 2, "mig-4g.71gb": 1,
                    "mig-7g.141gb": 1},
}


PARTITIONED = re.compile(r"\.mig-[0-9]+g\.[0-9]+gb$")  # the name of a MIG-partitioned type ends so


def partitioned(t: InstanceType, profile: str) -> InstanceType:
    """A node of ``t`` whose GPUs are each split into ``profile`` partitions: its accelerators are the partitions
    (``ml.p5.48xlarge.mig-1g.10gb``: 8 GPUs x 7 = 56). Raises ValueError naming the valid profiles."""
    profiles = MIG_PROFILES.get(t.accelerator_kind or "")
    if profiles is None:
        models = ", ".join(MIG_PROFILES)
        raise ValueError(f"{t.name} ({t.accelerator_kind or 'no accelerators'}) has no MIG partitions "
                         f"(GPU models with MIG: {models})")
    if profile not in profiles:
        raise ValueError(f"{profile!r} is not a MIG profile of {t.accelerator_kind} ({', '.join(profiles)})")
    return InstanceType(name=f"{t.name}.{profile}", accelerators=t.accelerators * profiles[profile], vcpu=t.vcpu,
                        memory_gib=t.memory_gib, accelerator_kind=f"{t.accelerator_kind} {profile}")


class GpuThresholds(BaseModel):
    """What a healthy GPU of one model must measure in the deep health check (floors are about half of
    what a healthy card reaches, so only a sick or misconfigured one fails)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    min_matmul_tflops: float = Field(default=1.0, gt=0, le=100_000)  # bf16 (fp32 where bf16 is missing)
    min_memory_gbps: float = Field(default=10.0, gt=0, le=100_000)  # device-to-device copy, read + write
    max_temperature_c: float = Field(default=90.0, gt=0, le=150)
    max_retired_pages: int = Field(default=60, ge=0, le=10_000)  # pending or retired, per GPU
    min_nccl_busbw_gbps: float = Field(default=1.0, gt=0, le=100_000)  # all-reduce across the node's GPUs


GENERIC_GPU = GpuThresholds()
# (tokens that must all appear in the GPU's name, thresholds), most specific first
GPU_MODELS: list[tuple[tuple[str, ...], GpuThresholds]] = [
    (("H200",), GpuThresholds(min_matmul_tflops=400, min_memory_gbps=2400, max_temperature_c=87,
                              min_nccl_busbw_gbps=150)),
    (("H100",), GpuThresholds(min_matmul_tflops=400, min_memory_gbps=1500, max_temperature_c=87,
                              min_nccl_busbw_gbps=150)),
    (("A100",), GpuThresholds(min_matmul_tflops=150, min_memory_gbps=700, max_temperature_c=87,
                              min_nccl_busbw_gbps=80)),
    (("A10G",), GpuThresholds(min_matmul_tflops=30, min_memory_gbps=250, max_temperature_c=88,
                              min_nccl_busbw_gbps=5)),
    (("L4",), GpuThresholds(min_matmul_tflops=40, min_memory_gbps=120, max_temperature_c=88, min_nccl_busbw_gbps=5)),
]


def _tokens(text: str) -> set[str]:
    return {t for t in re.split(r"[\s\-_/]+", text.upper()) if t}


def gpu_thresholds(gpu_name: str) -> GpuThresholds:
    """The catalog's thresholds for a GPU model by its NVML name (e.g. 'NVIDIA H100 80GB HBM3')."""
    have = _tokens(gpu_name)
    return next((th for words, th in GPU_MODELS if set(words) <= have), GENERIC_GPU)


def match_instance_type(gpu_name: str, count: int, vcpu: int) -> InstanceType | None:
    """The catalog instance type with ``count`` GPUs of this model (8 x 'NVIDIA H100 80GB HBM3' ->
    ml.p5.48xlarge): its accelerator kind's words all appear in the GPU's name. Of several, the largest that
    has no more vCPUs than this host."""
    have = _tokens(gpu_name)
    found = [t for t in _ROWS if t.accelerators == count and t.accelerator_kind
             and _tokens(t.accelerator_kind) <= have]
    fitting = [t for t in found if t.vcpu <= vcpu]
    return max(fitting or found, key=lambda t: t.vcpu, default=None)
