"""What the control plane remembers about a job's current attempt while its processes live.

It is kept in memory and written to the job's ``exit_info`` in the store at every change, so a restarted
control plane knows which replicas of which attempt it started, on which accelerator slots, and why they
are being stopped.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

STOP_PREEMPT = "preempt"  # back to Pending when every replica has stopped
STOP_CANCEL = "cancel"  # Cancelled
STOP_RESTART = "restart"  # auto-resume: Pending again with attempt + 1
STOP_FAIL = "fail"  # Failed


@dataclass
class Run:
    attempt: int
    launched: bool = False
    after: list[str] = field(default_factory=list)  # engine ids of victims that must stop first
    stopping: str | None = None
    stop_reason: str = ""
    exits: dict[str, str] = field(default_factory=dict)  # rank -> reason
    codes: dict[str, int | None] = field(default_factory=dict)  # rank -> exit code (None: signal)
    slots: dict[str, list[int]] = field(default_factory=dict)  # node -> accelerator slots

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any] | None, attempt: int) -> Run:
        if not d or d.get("attempt") != attempt:
            return cls(attempt=attempt)
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


class Slots:
    """Which accelerator slots of each node are taken, so jobs on one node get disjoint devices."""

    def __init__(self) -> None:
        self.used: dict[str, set[int]] = {}

    def take(self, node: str, count: int, size: int) -> list[int]:
        used = self.used.setdefault(node, set())
        free = [i for i in range(size) if i not in used][:count]
        used.update(free)
        return free

    def mark(self, node: str, slots: list[int]) -> None:
        self.used.setdefault(node, set()).update(slots)

    def give_back(self, node: str, slots: list[int]) -> None:
        self.used.get(node, set()).difference_update(slots)
