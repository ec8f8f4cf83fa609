"""The door to the control plane's core: named commands, and reads that change nothing.

Every module outside :mod:`fairpod.server.core` (the routes, the views, the keepers, node health) knows the core
only as :class:`Core`: it has no store, no snapshot, no lock and no live attempts to reach into. Reads of the
store go through ``queries`` (:class:`fairpod.server.core.queries.Queries`, never behind the core's lock); reads
of the engine's memory through :meth:`Core.engine_view` (never waits for a turn: ``core.published``) or
:meth:`Core.engine_read`; every change through a named command, which takes the
lock itself and writes the store, then the memory (one owner per transition: docs/architecture.md).
:class:`fairpod.server.core.ControlPlane` implements this protocol; ``tests/test_layers.py`` checks that nothing
outside the core reaches past it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from fairpod.executors.base import Executor
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload
from fairpod.model.jobs import JobSpec
from fairpod.model.spec import ClusterSpec
from fairpod.server.core.facts import Facts
from fairpod.server.core.published import AsOf
from fairpod.server.core.queries import Queries
from fairpod.store.records import EngineJob, Job, Node, User

T = TypeVar("T")

# a throttled job array's tasks, as the core lists them for the estimates (fairpod.server.accounting.eta.held_starts):
# (limit, [(job id, its workload, held?) in task order])
Throttled = list[tuple[int, list[tuple[int, Workload, bool]]]]


class Busy(Exception):
    """The core's lock was not free within the wait given to :meth:`Core.engine_read` (a long turn)."""


class Core(Protocol):
    """The control plane as the rest of fairpod sees it. Every command that changes state takes the lock itself."""

    queries: Queries  # the store, read only
    executor: Executor
    spec: ClusterSpec
    home: Path
    clock: Callable[[], float]
    wake: threading.Event  # wakes the reconcile loop for a turn now
    cycles: int
    cycle_seconds: float
    # False in an API worker (fairpod up --api-workers): the engine's snapshot is the core process's, so its views
    # leave out what only that memory knows (a queue position, what a borrowing job borrows now)
    engine_memory: bool
    # what runs beside the core and the routes show: fairpod.server.accounting.eta.Estimates, usage.UsageSampler,
    # turns.TurnHistogram, health.manager.HealthManager (None without node health), the services' keeper
    eta: Any
    usage: Any
    turns: Any
    health: Any
    services: Any

    # -- reads of the core's memory ------------------------------------------------------------------------
    def engine_read(self, fn: Callable[[Snapshot], T], *, lock: bool = False, wait: float | None = None) -> T:
        """``fn`` of the engine's snapshot; it must not change it. ``lock``: under the core's lock (a consistent
        view; ``wait``: at most that many seconds for it, else :class:`Busy`); without, the snapshot as it is
        now (it is replaced whole when rebuilt)."""
        ...

    def engine_view(self, key: Hashable, fn: Callable[[Snapshot], T]) -> tuple[T, AsOf] | None:
        """``fn`` of a consistent view of the engine's snapshot, never waiting for a turn: the live one when the
        core is free, else the answer published for ``key`` at the end of the last turn (at most one turn old;
        :class:`AsOf` says which); a key with none published yet (its first read) waits for the lock, as reads
        did before answers were published; None only when the core was held ``door.FIRST_WAIT`` (30 s: stuck).
        ``fn`` must not change the snapshot, nor may the caller change what it gets (copy it first);
        ``key`` names what ``fn`` reads (:mod:`fairpod.server.core.published`)."""
        ...

    def engine_facts(self, fn: Callable[[Facts], T]) -> tuple[T, AsOf]:
        """``fn`` of the engine's facts about one job or node at a time (:mod:`fairpod.server.core.facts`: a queue
        position, a type's lenders, a node's jobs and domains), never waiting for a turn: the live snapshot when
        the core is free, else the facts the last turn published after its commit (at most one turn old, never
        a turn half done; :class:`AsOf` says which). ``fn`` must not change what it gets."""
        ...

    def trial_snapshots(self, specs: list[ClusterSpec]) -> list[Snapshot]:
        """The engine's snapshot of one committed state of the store under each of ``specs``, built without the
        core's lock (a spec's dry run): the store's nodes and unfinished jobs read in one transaction, the
        fair-share history and budget hours as in :meth:`engine_facts`."""
        ...

    def attempt_state(self, job_id: int) -> dict[str, Any] | None:
        """A copy of the live attempt's state of a job (what the store keeps as ``run_state``); None if none."""
        ...

    def live_attempts(self) -> dict[int, int]:
        """Job id -> attempt of every attempt whose replicas run (launched, not stopping)."""
        ...

    def workload(self, job: Job | EngineJob, spec: ClusterSpec | None = None) -> Workload: ...

    def throttled_arrays(self) -> Throttled:
        """The throttled job arrays with held tasks; call it in engine_read."""
        ...

    def checkpoint_root(self) -> Path: ...  # where jobs' checkpoint directories live

    def budget_rows(self, teams: list[str] | None = None) -> list[dict[str, Any]]:
        """Every budget now (of ``teams``; None: all): team, instance type, period, hours used, its state."""
        ...

    def database_lost(self, e: BaseException) -> bool: ...  # e came of an unreachable database (server.keepers.outage)

    # -- commands -------------------------------------------------------------------------------------------
    def event(self, kind: str, msg: str, job: Any = None, /, **data: Any) -> None: ...

    def node_event(self, node: str, kind: str, msg: str, data: dict[str, Any]) -> None: ...

    def audit(self, actor: str, action: str, target: str, detail: dict[str, Any]) -> None: ...

    def submit(self, spec: JobSpec, actor: str, key: str | None = None) -> Job: ...

    def submit_keyed(self, spec: JobSpec, actor: str, key: str | None = None) -> tuple[Job, bool]: ...

    async def submit_answered(self, spec: JobSpec, actor: str, key: str | None,
                              answer: Callable[[Job], T]) -> tuple[Job, bool, T]:
        """:meth:`submit_keyed` awaited from the event loop, and ``answer(job)`` (the route's view, rendered
        where the submit was written, not in the loop)."""
        ...

    def submit_array(self, spec: JobSpec, text: str, actor: str,
                     key: str | None = None) -> tuple[list[Job], bool]: ...

    def cancel(self, job: Job, actor: str, left: str | None = None) -> Job: ...

    def cancel_array(self, tasks: list[Job], target: str, actor: str, chunk: int = 500) -> list[Job]: ...

    def set_priority(self, job: Job, priority_class: str | None, actor: str) -> Job: ...

    # a job's replicas: gang readiness, recovery from peers, restarts in place (fairpod.sdk)
    def replica_ready(self, job: Job, rank: int, attempt: int) -> bool: ...

    def replica_recovered(self, job: Job, ranks: list[int], source: int, step: int, seconds: float) -> bool: ...

    def replica_restarts(self, job: Job) -> dict[str, Any]: ...

    def report_progress(self, job: Job, step: int | None, checkpoint: str | None,
                        next_checkpoint_in: float | None = None) -> Job: ...

    def replace_spec(self, spec: ClusterSpec, actor: str = "fairpod", action: str = "spec.apply") -> None: ...

    def create_user(self, name: str, role: Any, teams: list[str], actor: str) -> tuple[User, str]: ...

    def issue_token(self, user: str, description: str, actor: str, action: str) -> str: ...

    def revoke_user_tokens(self, user: str, actor: str) -> int: ...

    def record_usage(self, now: float, samples: list[Any]) -> None: ...

    def roll_up_usage(self, last_sample: float, samples: int) -> bool: ...

    def prune(self, before: float, limit: int) -> Any: ...

    def set_meta(self, key: str, value: str) -> None: ...

    # nodes
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
