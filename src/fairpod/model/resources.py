"""Resource vectors: (accelerators, millicores of vCPU, MiB of memory), all integers.

Integers keep quota arithmetic exact; the user-facing units (vCPU, GiB) are converted at the edges.
"""

from __future__ import annotations

from typing import NamedTuple

from fairpod.model.catalog import InstanceType


class Res(NamedTuple):
    acc: int
    mcpu: int
    mib: int

    def __add__(self, o: object) -> Res:  # type: ignore[override]
        assert isinstance(o, Res)
        return Res(self.acc + o.acc, self.mcpu + o.mcpu, self.mib + o.mib)

    def __sub__(self, o: Res) -> Res:
        return Res(self.acc - o.acc, self.mcpu - o.mcpu, self.mib - o.mib)

    def scale(self, k: float) -> Res:
        return Res(int(self.acc * k), int(self.mcpu * k), int(self.mib * k))

    def fits_in(self, o: Res) -> bool:
        return self.acc <= o.acc and self.mcpu <= o.mcpu and self.mib <= o.mib

    def clip0(self) -> Res:
        return Res(max(0, self.acc), max(0, self.mcpu), max(0, self.mib))

    @property
    def vcpu(self) -> float:
        return self.mcpu / 1000

    @property
    def memory_gib(self) -> float:
        return self.mib / 1024

    def human(self) -> dict[str, float]:
        return {"accelerators": self.acc, "vcpu": self.vcpu, "memory_gib": self.memory_gib}


ZERO = Res(0, 0, 0)


def node_res(t: InstanceType) -> Res:
    """The whole capacity of one node of type ``t``."""
    return Res(t.accelerators, round(t.vcpu * 1000), round(t.memory_gib * 1024))


def by_ratio(
    t: InstanceType,
    accelerators: float | None = None,
    vcpu: float | None = None,
    memory_gib: float | None = None,
) -> Res:
    """Fill the missing parts of a request by the instance type's ratio.

    The first given of accelerators, vcpu, memory_gib sets the fraction of a node; the other
    missing ones take the same fraction. Raises ValueError when nothing is given or when
    accelerators are asked of a type that has none.
    """
    whole = node_res(t)
    if accelerators is not None and accelerators > 0 and t.accelerators == 0:
        raise ValueError(f"{t.name} has no accelerators; ask for vcpu or memory_gib instead")
    if accelerators is not None and t.accelerators > 0:
        frac = accelerators / t.accelerators
    elif vcpu is not None:
        frac = vcpu / t.vcpu
    elif memory_gib is not None:
        frac = memory_gib / t.memory_gib
    elif accelerators is not None:  # accelerators == 0 on a CPU type
        frac = 0.0
    else:
        raise ValueError("give at least one of count, accelerators, vcpu or memory_gib")
    acc = round(accelerators) if accelerators is not None else round(whole.acc * frac)
    mcpu = round(vcpu * 1000) if vcpu is not None else round(whole.mcpu * frac)
    mib = round(memory_gib * 1024) if memory_gib is not None else round(whole.mib * frac)
    return Res(acc, mcpu, mib)


def partition_share(t: InstanceType, partitions: int) -> Res:
    """``partitions`` MIG partitions of a node of the partitioned type ``t`` with their share of its CPU and memory,
    rounded down, so that the node's partitions all fit it whatever counts the jobs ask for (rounding to nearest,
    28 x 2 of 56 would ask 12 mCPU too many)."""
    whole = node_res(t)
    return Res(partitions, whole.mcpu * partitions // whole.acc, whole.mib * partitions // whole.acc)
