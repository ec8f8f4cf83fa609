"""The core's state as its transitions see it: the store, the engine's snapshot, the live attempts and their
slots, the holds, the spec, the clock, the executor and the one lock. Private to :mod:`fairpod.server.core`
(``tests/test_layers.py``): every other module sees :class:`fairpod.server.core.api.Core` only.
:class:`fairpod.server.core.ControlPlane` is the one object that holds it."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any, Protocol

from fairpod.executors.base import JobLaunch
from fairpod.governance.snapshot import Snapshot
from fairpod.server.core.api import Core
from fairpod.server.core.batch import BatchingStore
from fairpod.server.runs import Run, Slots
from fairpod.store.records import Job


class CoreState(Core, Protocol):
    """What a transition (``fairpod.server.core.transitions``) reads and writes; it holds ``lock``."""

    lock: threading.RLock
    store: BatchingStore
    snap: Snapshot
    runs: dict[int, Run]  # job id -> its live attempt
    slots: Slots  # the accelerator slots of the live attempts
    array_holds: dict[int, Any]  # array job id -> fairpod.server.core.transitions.array_holds.Hold
    restart_holds: dict[int, float]  # job id -> when its restart backoff ends (transitions.backoff)

    def begin_stop(self, job: Job, run: Run, kind: str, reason: str) -> None: ...

    def _save_run(self, job: Job, run: Run, **changes: Any) -> Job: ...

    def _partitions_per_gpu(self, node: str) -> int: ...

    def _change(self) -> AbstractContextManager[None]: ...

    def build_launch(self, job: Job, run: Run, ranks: list[int] | None = None) -> JobLaunch: ...
