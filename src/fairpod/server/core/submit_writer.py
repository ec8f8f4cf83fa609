"""An API worker's submits written by one thread of its own (``fairpod up --api-workers N``).

The submit route of a worker is a coroutine: it hands the job to the worker's :class:`SubmitWriter` and awaits
the answer, never holding a thread of the API's pool. The writer thread takes every submit queued since its last
transaction (at most :data:`GROUP` of them), checks each against the cluster, writes them in one transaction (the
core's ``commit_group`` through ``write``: each submit answered with its own job or its own error), renders each
answer (``answer``, the route's view of the job, in this thread, not in the event loop), and hands the answers back
to the loops that wait for them, one callback a loop a group.

Before, each submit held one of the pool's threads (``FAIRPOD_API_THREADS``, 8) through its check, its wait for
the worker's writer and its write: a worker's groups held at most 8 submits, and each submit paid a round trip
of the thread pool and a turn at the writer's lock (benchmarks/README.md, "A worker's submits on one thread").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fairpod.model.jobs import JobSpec
from fairpod.server.core.submits import Submit
from fairpod.store.records import Job

log = logging.getLogger("fairpod.worker")

GROUP = 256  # submits in one transaction at most: SQLite's write lock is held while they are written


@dataclass(eq=False, slots=True)
class Asked:
    """One submit waiting for the writer: what was asked, how to answer it, and where."""

    spec: JobSpec  # with its ``user`` set: the caller's
    actor: str
    key: str | None
    answer: Callable[[Job], Any]  # the route's view of the job, rendered by the writer
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[tuple[Job, bool, Any]] = field(repr=False)


class SubmitWriter:
    """The writer thread of one API worker. ``submit`` is called in the event loop; ``make`` turns a spec into the
    queued :class:`Submit` (the check against the cluster spec of the moment), ``write`` commits a group (the
    worker's ``commit_group``, which answers each submit)."""

    def __init__(self, make: Callable[[JobSpec, str, str | None], Submit],
                 write: Callable[[list[Submit]], None], name: str = "fairpod-submit-writer") -> None:
        self._make = make
        self._write = write
        self._cv = threading.Condition()
        self._queue: list[Asked] = []
        self._name = name
        self._thread: threading.Thread | None = None

    async def submit(self, spec: JobSpec, actor: str, key: str | None,
                     answer: Callable[[Job], Any]) -> tuple[Job, bool, Any]:
        """The job ``spec`` queued (or the one an earlier submit with ``key`` made), whether this submit created
        it, and ``answer(job)``; raises the submit's own error (an invalid job, a name taken, the store's)."""
        loop = asyncio.get_running_loop()
        asked = Asked(spec, actor, key, answer, loop, loop.create_future())
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._queue.append(asked)
            self._cv.notify()
        return await asked.future

    def __len__(self) -> int:
        """The submits waiting for the writer's next group."""
        with self._cv:
            return len(self._queue)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue:
                    self._cv.wait()
                group, self._queue = self._queue[:GROUP], self._queue[GROUP:]
            try:
                self._one_group(group)
            except BaseException as e:  # noqa: BLE001  # a fault of the writer itself: the thread must go on, or
                # every later submit of this worker would wait for ever; this group's callers get the error
                log.exception("the submit writer failed on a group of %d submits", len(group))
                _post([(a, None, e) for a in group])

    def _one_group(self, group: list[Asked]) -> None:
        """Check, write and answer one group; whatever fails answers only the submits it concerns."""
        answers: list[tuple[Asked, Any, BaseException | None]] = []
        made: list[tuple[Asked, Submit]] = []
        for a in group:
            try:
                made.append((a, self._make(a.spec, a.actor, a.key)))
            except BaseException as e:  # noqa: BLE001  # a check that raised (not one that answered): this submit's
                answers.append((a, None, e))
        if made:
            try:
                self._write([s for _, s in made])
            except BaseException as e:  # noqa: BLE001  # each submit holds the error (commit_group)
                log.debug("a group of %d submits failed: %s", len(made), e)
        for a, s in made:
            if s.error is not None or s.job is None:
                answers.append((a, None, s.error or RuntimeError("the submit was not answered")))
                continue
            try:
                answers.append((a, (s.job, s.created, a.answer(s.job)), None))
            except BaseException as e:  # noqa: BLE001
                answers.append((a, None, e))
        _post(answers)


def _post(answers: list[tuple[Asked, Any, BaseException | None]]) -> None:
    """Hand each answer (its result or its error) back to the loop its caller waits in: one callback a loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Asked, Any, BaseException | None]]] = {}
    for item in answers:
        by_loop.setdefault(item[0].loop, []).append(item)
    for loop, items in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits for these answers
            loop.call_soon_threadsafe(_settle, items)


def _settle(items: list[tuple[Asked, Any, BaseException | None]]) -> None:
    """In the waiting loop: each future its answer or its error (not one whose caller has gone)."""
    for a, result, error in items:
        if a.future.done():
            continue
        if error is not None:
            a.future.set_exception(error)
        else:
            a.future.set_result(result)


__all__ = ["GROUP", "SubmitWriter"]
