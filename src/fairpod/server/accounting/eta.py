"""Estimated start times of pending jobs (``estimated_start`` in the API): the engine run forward on a copy of
the control plane's snapshot (``fairpod.governance.forecast``), in a thread of its own. Estimates are refreshed
when jobs wait and the snapshot changed (jobs started, ended, were queued), or ``max_age`` seconds passed; at
most every ``every`` seconds, and never sooner than ``spacing`` times the last forecast's CPU time after it, so
that estimating takes at most 1/``spacing`` of a CPU however long the queue, nor sooner than the last copy's
time under the lock divided by ``lock_share``, so that the copy holds the control plane's lock at most that
share of the time (a long queue's copy takes tens of milliseconds, during which submits and the reconcile
turn wait: benchmarks/load.py).

Running jobs end at their declared duration (``expected_duration_seconds``), else at the typical duration of
their team's succeeded jobs of the same shape (instance type, nodes, accelerators per node: the median of the
last ``KEEP``), else never (their waiters get no estimate). The lock is held only to serialize the snapshot
(``pickle``: ~10 ms for 1,000 pending jobs, see benchmarks/eta.py); the copy is rebuilt and the forecast runs
outside it, bounded by ``max_cycles`` engine cycles and ``horizon`` seconds ahead. The figures
are estimates: nothing new is assumed to arrive and no job ends early.

A job that arrived after the last refresh gets its estimate at once when someone asks for it (``ensure``:
``get-job``, a ``list-jobs`` page), within the same CPU and lock budget, when the last refresh took at most
``inline`` seconds (copy and forecast: a queue of a few hundred jobs) and no turn holds the control plane (the
request does not wait for the lock); with a longer queue the request does not
wait for a forecast (at 10,000 jobs waiting one takes tenths of a second, and a reader asking for new jobs made every
such request that slow: benchmarks/datacenter.py) but wakes the estimator's thread, which refreshes as soon as the
budget allows; until then the new job's ``estimated_start`` is null, as for a job with no estimate. The held tasks of a throttled job array
(``%N``, kept out of the engine's snapshot) get one too (``held_starts``): each starts when one of the array's N
slots frees, its tasks ahead ending at their durations, as above.
"""

from __future__ import annotations

import heapq
import logging
import pickle
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from fairpod.governance.forecast import estimate_starts
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload
from fairpod.model.jobs import JobState
from fairpod.server.core.api import Busy, Core, Throttled
from fairpod.store.records import Job

log = logging.getLogger("fairpod.eta")

KEEP = 50  # succeeded runs remembered per team and shape
Shape = tuple[str, str, int, int]  # team, instance type, nodes, accelerators per node


def shape_of(job: Job) -> Shape:
    return (job.team, job.instance_type, job.nodes, job.acc)


class Typical:
    """How long a team's succeeded jobs of one shape ran (their last attempt), the last ``KEEP`` of each."""

    def __init__(self) -> None:
        self.runs: dict[Shape, deque[float]] = {}

    def observe(self, job: Job, ended: float) -> None:
        if job.started_at is not None and ended >= job.started_at:
            self.runs.setdefault(shape_of(job), deque(maxlen=KEEP)).append(ended - job.started_at)

    def medians(self) -> dict[Shape, float]:
        return {k: statistics.median(v) for k, v in self.runs.items() if v}


class Estimates:
    def __init__(self, *, every: float = 5.0, max_age: float = 60.0, spacing: float = 4.0, max_cycles: int = 2000,
                 horizon: float = 30 * 86400, lock_share: float = 0.005, inline: float = 0.02) -> None:
        self.every = every
        self.inline = inline  # a request refreshes itself only if the last refresh took at most this
        self.lock_share = lock_share
        self.max_age = max_age
        self.spacing = spacing
        self.max_cycles = max_cycles
        self.horizon = horizon
        self.starts: dict[int, float | None] = {}  # job id -> estimated start (epoch s); replaced whole
        self.at: float | None = None  # when the last estimates were made (the snapshot's time)
        self.copy_seconds = 0.0  # the lock held for the copy, last refresh
        self.forecast_seconds = 0.0  # the forecast itself (outside the lock), last refresh
        self.forecast_cpu = 0.0  # its CPU time
        self.refreshes = 0
        self._seen: tuple | None = None  # what the snapshot looked like at the last refresh
        self._last = -float("inf")  # time.monotonic() of the last refresh
        self.typical = Typical()
        self._seeded = False
        self._stop = threading.Event()
        self._wake = threading.Event()  # a request asked for estimates of new jobs (or stop)
        self._wanted = False
        self._thread: threading.Thread | None = None

    def get(self, job: Job) -> float | None:
        return self.starts.get(job.id) if job.state == JobState.PENDING else None

    def seed(self, cp: Core) -> None:
        """The typical durations from the store's latest succeeded jobs (once; later ones as they finish)."""
        if self._seeded:
            return
        self._seeded = True
        for job in reversed(cp.queries.list_jobs(state=JobState.SUCCEEDED, limit=20 * KEEP, descending=True)):
            if job.finished_at is not None:
                self.typical.observe(job, job.finished_at)

    def ensure(self, cp: Core, jobs: list[Job]) -> None:
        """Pending jobs that arrived after the last refresh: refresh now, if the CPU and lock budget allows
        (call it without holding the control plane's lock)."""
        if all(j.state != JobState.PENDING or j.id in self.starts for j in jobs):
            return
        if self.copy_seconds + self.forecast_seconds <= self.inline and self._allowed():
            try:
                self.refresh(cp, wait=0)  # only if the core is free: a request never waits for a turn
                return
            except Busy:
                pass
        self._wanted = True  # too long to make the request wait for, or a turn holds the core: the thread does it
        self._wake.set()

    def _allowed(self) -> bool:
        """Does the CPU and lock budget allow a refresh now?"""
        since = time.monotonic() - self._last
        return since >= max(self.spacing * self.forecast_cpu, self.copy_seconds / self.lock_share)

    def due(self, cp: Core) -> bool:
        """Is a refresh due now (see the module doc)? Also when a request asked for new jobs' estimates."""
        if self._wanted and self._allowed():
            return True
        since = time.monotonic() - self._last
        if since < max(self.every, self.spacing * self.forecast_cpu, self.copy_seconds / self.lock_share):
            return False
        return since >= self.max_age or self._signature(cp) != self._seen

    @staticmethod
    def _signature(cp: Core) -> tuple:
        return cp.engine_read(_signature)

    def refresh(self, cp: Core, wait: float | None = None) -> None:
        """Estimate every pending job's start now (``wait``: for the core's lock at most that long, else
        :class:`fairpod.server.core.api.Busy`)."""
        t0 = time.perf_counter()
        started = time.monotonic()

        def copy(live: Snapshot) -> tuple[float, bytes, dict[Any, float], Throttled] | float:
            """Under the lock: what the forecast starts from, or the snapshot's time when nothing is pending."""
            self.seed(cp)
            self._seen = _signature(live)
            throttled = cp.throttled_arrays()
            if not live.pending and not throttled:
                return live.now
            return cp.clock(), pickle.dumps(live, pickle.HIGHEST_PROTOCOL), self.typical.medians(), throttled

        got = cp.engine_read(copy, lock=True, wait=wait)
        self._last = started
        self._wanted = False
        if not isinstance(got, tuple):
            self.starts, self.at, self.copy_seconds, self.forecast_seconds = {}, got, 0.0, 0.0
            self.forecast_cpu = 0.0
            return
        now, frozen, medians, throttled = got
        t1 = time.perf_counter()
        c1 = time.thread_time()
        snap = pickle.loads(frozen)
        snap.now = now

        def durations(w: Workload) -> float | None:
            return medians.get((w.team, w.itype, w.n, w.req.acc))

        est = estimate_starts(snap, durations=durations, max_cycles=self.max_cycles, horizon=self.horizon,
                              in_place=True)
        starts = {int(k): v for k, v in est.items()}
        starts.update(held_starts(throttled, starts, durations, now))
        self.starts = starts
        self.at = now
        self.copy_seconds, self.forecast_seconds = t1 - t0, time.perf_counter() - t1
        self.forecast_cpu = time.thread_time() - c1
        self.refreshes += 1

    def start(self, cp: Core) -> None:
        def loop() -> None:
            while True:
                try:
                    if self.due(cp):
                        self.refresh(cp)
                except Exception as e:  # an estimate is never worth stopping the server for
                    if not cp.database_lost(e):
                        log.exception("estimating start times failed")
                if self._wanted:  # asked for, but the budget did not allow it yet: when it will
                    wait = max(self.spacing * self.forecast_cpu, self.copy_seconds / self.lock_share)
                    self._wake.wait(min(1.0, max(0.0, self._last + wait - time.monotonic())))
                else:
                    self._wake.wait(1.0)
                self._wake.clear()
                if self._stop.is_set():
                    return

        self._thread = threading.Thread(target=loop, name="fairpod-eta", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def _signature(snap: Snapshot) -> tuple:
    """Changes when the snapshot does: a new object after a rebuild; its version counts every start and stop."""
    return (id(snap), snap.version, len(snap.pending), len(snap.running))


def held_starts(throttled: Throttled, starts: dict[int, float | None],
                durations: Callable[[Workload], float | None], now: float) -> dict[int, float | None]:
    """Estimated starts of held array tasks: the array's ``limit`` slots, each free when the task in it ends
    (a running task at its start plus its duration, a pending one at its estimate plus its duration); each held
    task, in order, takes the slot that frees first. Unknown durations give no estimate from there on."""
    out: dict[int, float | None] = {}
    for limit, tasks in throttled:
        frees: list[float] = []
        for jid, w, held in tasks:
            if held:
                continue
            begun = w.started if w.started is not None else starts.get(jid)
            d = w.expected if w.expected is not None else durations(w)
            frees.append(begun + d if begun is not None and d is not None else float("inf"))
        frees = sorted(frees)[:limit] + [now] * max(0, limit - len(frees))
        heapq.heapify(frees)
        for jid, w, held in tasks:
            if not held:
                continue
            free = heapq.heappop(frees) if frees else float("inf")
            if free == float("inf"):
                out[jid] = None
                heapq.heappush(frees, free)
                continue
            begin = max(free, now)
            out[jid] = begin
            d = w.expected if w.expected is not None else durations(w)
            heapq.heappush(frees, begin + d if d is not None else float("inf"))
    return out
