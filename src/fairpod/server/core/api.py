"""What the parts of the control plane (node membership, usage sampling, node health) use of its core.

They are given the :class:`fairpod.server.core.ControlPlane` itself, but know it only as this protocol,
so that no module of ``fairpod.server`` imports the core and is imported by it at once. ``ControlPlane``
names this protocol among its bases: what is listed here is what it promises.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from fairpod.executors.base import Executor
from fairpod.governance.snapshot import Snapshot, Workload
from fairpod.model.spec import ClusterSpec
from fairpod.store.records import Job, Node


class Core(Protocol):
    """The control plane's public side. Every method that changes state takes ``lock`` itself."""

    lock: threading.RLock
    store: Any  # fairpod.server.batch.BatchingStore
    executor: Executor
    spec: ClusterSpec
    snap: Snapshot
    home: Path
    clock: Callable[[], float]
    wake: threading.Event  # wakes the reconcile loop for a turn now
    cycles: int
    cycle_seconds: float

    def event(self, kind: str, msg: str, job: Any = None, /, **data: Any) -> None: ...

    def store_lost(self, e: BaseException) -> bool: ...  # e came of an unreachable database (server.outage)

    def add_node(self, name: str, group: str, itype: str, **fields: Any) -> None: ...

    def cordon(self, name: str, cordoned: bool = True) -> Node: ...

    def set_labels(self, name: str, labels: dict[str, Any]) -> Node: ...

    def quarantine(self, name: str, fault_type: str, reason: str) -> Node: ...

    def release(self, name: str) -> Node: ...

    def check_started(self, name: str) -> None: ...

    def check_passed(self, name: str, status: Any = None) -> None: ...

    def check_failed(self, name: str, fault_type: str, reason: str, action: str) -> list[int]: ...

    def check_reset(self, name: str) -> Node: ...

    def recovery_requested(self, name: str, action: str, status: Any) -> list[int]: ...

    def restarted(self, name: str, labels: dict[str, Any]) -> Node: ...

    def forget_node(self, name: str) -> None: ...

    def remove_node(self, name: str, reason: str) -> None: ...

    def node_fault(self, name: str, fault_type: str, reason: str, action: str) -> list[int]: ...

    def node_recovered(self, name: str, passed: bool = True) -> None: ...

    def set_schedulable(self, node: str, schedulable: bool) -> None: ...

    def jobs_on(self, name: str) -> list[int]: ...

    # job arrays (fairpod.server.arrays): throttled tasks kept out of the snapshot
    array_holds: dict[int, Any]  # array job id -> fairpod.server.core.transitions.array_holds.Hold
    restart_holds: dict[int, float]  # job id -> when its restart backoff ends (fairpod.server.core.transitions.backoff)

    def workload(self, job: Job, spec: ClusterSpec | None = None) -> Workload: ...

    # the watchdog (runtime limits, hangs); called from the reconcile loop, which holds the lock
    runs: dict[int, Any]  # job id -> fairpod.server.runs.Run

    def begin_stop(self, job: Job, run: Any, kind: str, reason: str) -> None: ...

    def build_launch(self, job: Job, run: Any, ranks: list[int] | None = None) -> Any: ...

    def output_seen(self, job: Job) -> float | None: ...

    def gpu_utilization(self, job: Job, run: Any) -> list[float] | None: ...
