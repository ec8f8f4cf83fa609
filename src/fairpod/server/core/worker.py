"""An API worker's view of the cluster (``fairpod up --api-workers N``): what a worker process needs to answer a
submit, list-jobs and get-job itself, from the store, without the core's memory.

A worker checks a submit with the core's own functions (:func:`fairpod.server.core.transitions.submit.check`:
the job against the stored spec, its nodes, the host's paths and the core's executor as
:class:`~fairpod.executors.base.Traits`) and writes it with the core's own transaction
(:func:`~fairpod.server.core.transitions.submit.write_submits`: the job, its ``JobSubmitted`` event, its audit entry
and its idempotency key, name uniqueness by the database's index), then answers. Concurrent submits in one
worker are written in one transaction, as the core's are (group commit: ``commit_group``). It never changes a job after
that: the core takes the job into the engine's queue at its next turn (:mod:`fairpod.server.core.foreign`), and
the commit wakes it: on PostgreSQL a ``NOTIFY`` in the submit's transaction (:mod:`fairpod.store.notify`), on SQLite
a datagram to the core (:class:`Poke`, :mod:`fairpod.server.runtime.wakes`). The engine's memory (queue positions, estimated starts, what a borrowing job
borrows now) is the core's: a worker's answers leave those out (``engine_memory`` False; docs/architecture.md).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

from fairpod.executors.base import Traits
from fairpod.governance.build import empty_snapshot
from fairpod.governance.snapshot import Snapshot
from fairpod.model.jobs import JobSpec
from fairpod.model.spec import ClusterSpec
from fairpod.server.core.facts import Facts, LiveFacts
from fairpod.server.core.memory import add_nodes, checkpoint_root_of
from fairpod.server.core.published import AsOf
from fairpod.server.core.queries import Queries
from fairpod.server.core.submit_writer import SubmitWriter
from fairpod.server.core.submits import Submit, SubmitQueue
from fairpod.server.core.transitions.submit import check, commit_group, write_submits
from fairpod.server.errors import WrongState
from fairpod.store import Store
from fairpod.store.records import Job
from fairpod.store.waits import WRITE_WAITS

log = logging.getLogger("fairpod.worker")
T = TypeVar("T")


class NoEstimates:
    """A worker holds no forecast of starts: that is the core's estimator thread (``server.accounting.eta``)."""

    def get(self, job: Job) -> None:
        return None

    def ensure(self, cp: Any, jobs: list[Job]) -> None:
        return None


class Poke:
    """Wakes the core's loop after a worker's commit: one datagram on the socket pair the core made for its workers
    (:mod:`fairpod.server.runtime.wakes`), with this worker's pid and its waits for the database's write lock so
    far (``store.waits``, for the core's /metrics). Sent from the committing thread and never waited for: when the
    core's queue is full (it has wakes to read already) or the core is gone, the poke is dropped, which only
    delays the job to the core's next periodic turn, or to its start."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.sent = 0

    def set(self) -> None:
        try:
            self._sock.send(self.body(), socket.MSG_DONTWAIT)
            self.sent += 1
        except OSError as e:  # BlockingIOError: the core's queue is full; ECONNREFUSED and the like: it is gone
            log.debug("the poke was not sent (%s); the core's next turn takes the job", e)

    @staticmethod
    def body() -> bytes:
        """What a wake carries: this worker's pid and its waits for the write lock (``store.waits``)."""
        return json.dumps({"pid": os.getpid(), "write_waits": WRITE_WAITS.figures()}).encode()


class WorkerCore:
    """The part of :class:`fairpod.server.core.api.Core` that the job routes of an API worker use."""

    engine_memory = False  # the engine's snapshot is the core process's: views leave out what only it knows
    cycles = 0
    cycle_seconds = 0.0
    usage = turns = health = services = None

    def __init__(self, store: Store, home: Path, executor: Traits, wake: Poke | None,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.queries = Queries(store)  # type: ignore[arg-type]  # a Store reads as the core's BatchingStore does
        self.home = Path(home)
        self.executor = executor
        self.clock = clock
        self.wake = wake
        self.eta = NoEstimates()
        self._mu = threading.Lock()
        self._writer = threading.Lock()  # held while a group of submits is written (submit)
        self.submits = SubmitQueue()  # submits waiting for the writer: written together
        self.writer = SubmitWriter(self._asked, self._write_group)  # the submit route's: one thread writes
        self._version = -1
        self.spec: ClusterSpec
        self.snap: Snapshot
        self.refresh()

    def refresh(self, src: Any = None) -> None:
        """The stored spec and its nodes again from ``src`` (default the store) when its version is not ours: at
        the start, then in each group of submits' write transaction (``write_submits``'s ``fresh``, which then checks
        each submit again against it), not in a transaction of its own before each submit: that read was a tenth of
        a worker's submit (benchmarks/README.md "The CPU of a worker's submit"). Reads (list, get) use the spec the
        last submit found."""
        src = self.store if src is None else src
        if src.spec_version() == self._version:
            return
        with self._mu:
            rec = src.get_spec()
            if rec is None:
                raise WrongState("the cluster has no spec yet", "no spec")
            self.spec, self.snap, self._version = rec.spec, self._nodes(rec.spec, src), rec.version

    def _nodes(self, spec: ClusterSpec, src: Any) -> Snapshot:
        """The engine's view of the stored nodes without jobs: what ``never_fits`` and the topology read."""
        snap = empty_snapshot(spec, self.clock())
        add_nodes(snap, spec, src.list_nodes())
        return snap

    def checkpoint_root(self) -> Path:
        return checkpoint_root_of(self.spec, self.home)

    def engine_read(self, fn: Callable[[Snapshot], T], *, lock: bool = False, wait: float | None = None) -> T:
        return fn(self.snap)  # nodes only (see engine_memory)

    def attempt_state(self, job_id: int) -> dict[str, Any] | None:
        """The live attempt's state as the core last committed it (the store's ``run_state``)."""
        job = self.queries.get_job(job_id)
        return None if job is None or job.run_state is None else dict(job.run_state)

    def engine_facts(self, fn: Callable[[Facts], T]) -> tuple[T, AsOf]:
        facts = LiveFacts(self.snap, AsOf(0, self.clock()), None)  # nodes only (see engine_memory)
        return fn(facts), facts.as_of

    def engine_view(self, key: Hashable, fn: Callable[[Snapshot], T]) -> tuple[T, AsOf] | None:
        return None

    def submit(self, spec: JobSpec, actor: str, key: str | None = None) -> Job:
        return self.submit_keyed(spec, actor, key)[0]

    def submit_keyed(self, spec: JobSpec, actor: str, key: str | None = None) -> tuple[Job, bool]:
        """Check one submit (the core's functions), commit it with the submits that arrived meanwhile in this
        process (group commit, as the core's: whoever takes the writer writes every queued submit in one
        transaction, each answered with its own job or its own error), waking the core (the commit notifies it
        on PostgreSQL; one :class:`Poke` a group on SQLite); answers after the commit. Whether this request created the
        job: False where an earlier one with ``key`` did."""
        spec = spec.model_copy(update={"user": actor})  # who submitted it: the caller, whatever was sent
        req = Submit(spec, actor, key, self.spec, check(self, spec))
        self.submits.add(req)
        with self._writer:  # one writer in this process: the submits queued while it waits are its group
            if not req.done:
                commit_group(self.submits.take(), self._write)
        if req.error is not None:
            raise req.error
        assert req.job is not None
        return req.job, req.created

    async def submit_answered(self, spec: JobSpec, actor: str, key: str | None,
                              answer: Callable[[Job], T]) -> tuple[Job, bool, T]:
        """:meth:`submit_keyed` from the event loop, and ``answer(job)``: the submit is checked, written and
        answered by this worker's writer thread (:class:`~fairpod.server.core.submit_writer.SubmitWriter`) with
        the others queued meanwhile, without a thread of the API's pool."""
        return await self.writer.submit(spec.model_copy(update={"user": actor}), actor, key, answer)

    def _asked(self, spec: JobSpec, actor: str, key: str | None) -> Submit:
        return Submit(spec, actor, key, self.spec, check(self, spec))

    def _write_group(self, group: list[Submit]) -> None:
        with self._writer:  # submit_keyed's callers (the same lock): one group at a time in this process
            commit_group(group, self._write)

    def _write(self, group: list[Submit]) -> None:
        """One transaction of the core's (``write_submits``); each submit then holds its answer."""
        answers = write_submits(self, group, notify=True, fresh=self.refresh)  # in the home's turn on SQLite (Store.turn)
        self.submits.commits += 1
        self.submits.written += len(group)
        for r, job, err, created in answers:
            r.job, r.error, r.created, r.done = job, err, created, True
        if self.wake is not None and any(created for *_, created in answers):
            self.wake.set()  # one wake for the group, by its writer


__all__ = ["NoEstimates", "Poke", "WorkerCore"]
