"""The core's state as its transitions see it: the store, the engine's snapshot, the live attempts and their
slots, the holds, the spec, the clock, the executor and the one lock. Private to :mod:`fairpod.server.core`
(``tests/test_layers.py``): every other module sees :class:`fairpod.server.core.api.Core` only.
:class:`fairpod.server.core.ControlPlane` is the one object that holds it; the methods of its bases
(``Memory``, ``Loop``) take it as their ``self`` (a mixin's self-type), so the type checker sees one state.

A part whose own module imports this one (the watchdog, the budgets, the history keeper, the log watch, the
services' keeper) is typed ``Any`` here: naming its class would close an import circle
(``tests/test_import_graph.py``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from fairpod.executors.base import JobLaunch
from fairpod.governance.snapshot import Snapshot
from fairpod.model.cluster import InstanceGroup
from fairpod.model.spec import ClusterSpec
from fairpod.server.core.api import Core
from fairpod.server.core.batch import BatchingStore
from fairpod.server.core.submits import SubmitQueue
from fairpod.server.core.turn_gate import TurnGate
from fairpod.server.runs import Run, Slots
from fairpod.store.records import EngineJob, Job


class CoreState(Core, Protocol):
    """What a transition (``fairpod.server.core.transitions``) reads and writes; it holds ``lock``."""

    lock: threading.RLock
    store: BatchingStore
    snap: Snapshot
    runs: dict[int, Run]  # job id -> its live attempt
    slots: Slots  # the accelerator slots of the live attempts
    array_holds: dict[int, Any]  # array job id -> fairpod.server.core.transitions.array_holds.Hold
    restart_holds: dict[int, float]  # job id -> when its restart backoff ends (transitions.backoff)
    gate: TurnGate  # the reconcile turn takes the lock ahead of waiting submits
    submits: SubmitQueue  # submits waiting for the lock (core.submits)
    output_sizes: dict[int, tuple[int, dict[int, int], float]]  # job -> (attempt, log sizes, written)
    launch_env: Callable[[Job], dict[str, str]]  # extra env of every launch (server.access.jobtoken)
    _groups: dict[str, InstanceGroup | None]  # node -> its instance group (cleared when rebuilt)
    history: Any  # fairpod.server.core.history.HistoryKeeper
    budgets: Any  # fairpod.server.core.transitions.budgets.BudgetKeeper

    def publish_facts(self) -> None: ...

    def build_snapshot(self, spec: ClusterSpec, unfinished: list[EngineJob] | None = None) -> Snapshot: ...

    def begin_stop(self, job: Job, run: Run, kind: str, reason: str) -> None: ...

    def build_launch(self, job: Job, run: Run, ranks: list[int] | None = None) -> JobLaunch: ...

    def reload(self) -> None: ...

    def _change(self) -> AbstractContextManager[None]: ...

    def _turn(self) -> AbstractContextManager[None]: ...

    # the memory (core.memory.Memory)
    def _rebuild(self, unfinished: list[EngineJob] | None = None) -> None: ...

    def _load_runs(self, unfinished: list[EngineJob]) -> list[tuple[EngineJob, Run]]: ...

    def _save_run(self, job: Job, run: Run, **changes: Any) -> Job: ...

    def _unsnap(self, jid: int) -> None: ...

    def _release(self, job: Job, run: Run) -> None: ...

    def _gpus_are_real(self, node: str) -> bool: ...

    def _group_of(self, node: str) -> InstanceGroup | None: ...

    def _partitions_per_gpu(self, node: str) -> int: ...
