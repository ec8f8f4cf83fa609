"""The :class:`fairpod.executors.base.HostGpus` capability of executors whose replicas run on the GPUs of this
host, read through NVML (or ``nvidia-smi``, or a FAKE file in tests: :func:`fairpod.executors.nvml.read_gpus`)."""

from __future__ import annotations

from collections.abc import Sequence

from fairpod.executors.base import ExecutorError


class ThisHostMig:
    """MIG devices from this host's NVML; no utilization (replicas may run elsewhere)."""

    def mig_devices(self, node: str, slots: Sequence[int], per_gpu: int, profile: str) -> tuple[str, ...]:
        from fairpod.executors.nvml import read_gpus

        gpus, source = read_gpus()
        out = []
        for s in slots:
            gpu, k = divmod(s, per_gpu)
            if gpu >= len(gpus) or k >= len(gpus[gpu].mig_devices):
                raise ExecutorError(f"node {node}: GPU {gpu} has no MIG device {k} ({source}); split its GPUs into "
                                    f"{per_gpu} x {profile} (nvidia-smi mig -cgi)")
            out.append(gpus[gpu].mig_devices[k])
        return tuple(out)

    def gpu_utilization(self, gpus: Sequence[int]) -> list[float] | None:
        return None


class ThisHostGpus(ThisHostMig):
    """MIG devices and utilization of this host's GPUs (the replicas run here)."""

    def gpu_utilization(self, gpus: Sequence[int]) -> list[float] | None:
        from fairpod.executors.nvml import read_gpus

        by_index = {g.index: g for g in read_gpus()[0]}
        held = [g for i in gpus if (g := by_index.get(i)) is not None]
        if not held or any(g.utilization_pct is None for g in held):
            return None
        return [float(g.utilization_pct or 0) for g in held]
