"""The timed executor — FOR BENCHMARKS AND TESTS ONLY: it runs no processes at all.

Each replica of a launched job "runs" for the job's duration and then ends with exit code 0, as reported by
:meth:`TimedExecutor.poll`. The duration is the job's ``FAIRPOD_BENCH_DURATION`` environment variable
(seconds), else the ``N`` of a command ``sleep N`` (also ``sh -c "sleep N"``), else 0. ``stop`` ends the
replicas at once, as if SIGTERM had killed them. Nothing is kept on disk: after a restart of the control
plane, jobs it had started are reported as ended while it was down (a new control plane on the *same*
executor object, as the in-process tests build, adopts its live replicas and unacknowledged exits).

It exists to measure the control plane alone (API, store, engine, reconcile loop) at rates that real
processes cannot reach on a small machine: ``fairpod up --executor timed`` (see ``benchmarks/``). Never use
it to run real work.
"""

from __future__ import annotations

import heapq
import re
import shlex
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from fairpod.executors.base import ExecutorError, JobLaunch, ReplicaExit
from fairpod.executors.hostgpus import ThisHostMig

DURATION_ENV = "FAIRPOD_BENCH_DURATION"
_SLEEP_RE = re.compile(r"^\s*(?:exec\s+)?sleep\s+([0-9]*\.?[0-9]+)\s*$")


def job_duration(job: JobLaunch) -> float:
    """Seconds each replica of ``job`` lasts: ``FAIRPOD_BENCH_DURATION``, else ``sleep N``, else 0."""
    raw = job.env.get(DURATION_ENV)
    if raw is not None:
        try:
            d = float(raw)
        except ValueError:
            raise ExecutorError(f"job {job.job}: {DURATION_ENV}={raw!r} is not a number of seconds") from None
        if not d >= 0:
            raise ExecutorError(f"job {job.job}: {DURATION_ENV} must be >= 0, got {raw!r}")
        return d
    cmd = list(job.command)
    if len(cmd) == 2 and cmd[0] in ("sleep", "/bin/sleep", "/usr/bin/sleep"):
        text = f"sleep {cmd[1]}"
    elif len(cmd) == 3 and cmd[0] in ("sh", "bash", "/bin/sh", "/bin/bash") and cmd[1] == "-c":
        text = cmd[2]
    else:
        text = shlex.join(cmd)
    m = _SLEEP_RE.match(text)
    return float(m.group(1)) if m else 0.0


class TimedExecutor(ThisHostMig):
    """Benchmark/testing executor that only waits out each job's duration (no processes; see module doc).

    Thread-safe. ``set_notify(fn)``: ``fn()`` is called (from a timer thread) whenever an exit becomes due,
    so the control plane's loop can collect it at once instead of on its next tick.
    """

    name = "timed"

    def __init__(self, root: str | Path | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self.root = Path(root) if root is not None else None
        self.clock = clock
        self._lock = threading.Condition()
        self._due: list[tuple[float, int, str, int, int]] = []  # (due, seq, job, attempt, rank)
        self._live: dict[tuple[str, int, int], float] = {}  # (job, attempt, rank) -> due
        self._ended: list[ReplicaExit] = []  # stopped replicas, reported by the next poll
        self._unacked: dict[tuple[str, int, int], ReplicaExit] = {}  # polled, not acknowledged yet
        self._seq = 0
        self._notify: Callable[[], None] | None = None
        self._closed = False
        self._timer: threading.Thread | None = None

    # -- the Executor protocol -----------------------------------------------------------------------
    def launch(self, job: JobLaunch) -> None:
        if not job.replicas:
            raise ExecutorError(f"job {job.job} has no replicas")
        duration = job_duration(job)
        with self._lock:
            if any(k[0] == job.job for k in self._live):
                raise ExecutorError(f"job {job.job} is still running; stop it and wait for its exits first")
            due = self.clock() + duration
            for rep in job.replicas:
                self._seq += 1
                heapq.heappush(self._due, (due, self._seq, job.job, job.attempt, rep.rank))
                self._live[(job.job, job.attempt, rep.rank)] = due
            self._lock.notify_all()

    def stop(self, job: str, attempt: int, grace_seconds: float) -> None:
        with self._lock:
            now = self.clock()
            for key in [k for k in self._live if k[0] == job and k[1] == attempt]:
                due = self._live.pop(key)  # its heap entry is dropped lazily
                if due < now:  # it had ended on its own already: exit 0, as a real replica would report
                    self._ended.append(ReplicaExit(job=job, attempt=attempt, rank=key[2], returncode=0,
                                                   signal=None, reason="exited 0", ended_at=due))
                    continue
                self._ended.append(ReplicaExit(job=job, attempt=attempt, rank=key[2], returncode=None,
                                               signal=int(signal.SIGTERM), reason="killed by SIGTERM",
                                               ended_at=now))
            if self._ended and self._notify is not None:
                self._notify()

    def poll(self, *, ack: bool = True) -> list[ReplicaExit]:
        with self._lock:
            now = self.clock()
            out, self._ended = self._ended, []
            while self._due and self._due[0][0] <= now:
                due, _, job, attempt, rank = heapq.heappop(self._due)
                if self._live.get((job, attempt, rank)) != due:
                    continue  # stopped earlier
                del self._live[(job, attempt, rank)]
                out.append(ReplicaExit(job=job, attempt=attempt, rank=rank, returncode=0, signal=None,
                                       reason="exited 0", ended_at=due))
            for e in out:
                self._unacked[(e.job, e.attempt, e.rank)] = e
            out = sorted(self._unacked.values(), key=lambda e: (e.ended_at, e.job, e.rank))
            if ack:
                self._unacked.clear()
            self._lock.notify_all()  # the timer looks for the next due exit
        return out

    def ack(self, exits: Sequence[ReplicaExit]) -> None:
        with self._lock:
            for e in exits:
                self._unacked.pop((e.job, e.attempt, e.rank), None)

    def running(self) -> dict[str, int]:
        with self._lock:
            out: dict[str, int] = {}
            for job, attempt, _ in self._live:
                out[job] = max(out.get(job, attempt), attempt)
            return out

    def adopt(self, *, ack: bool = True) -> list[ReplicaExit]:
        """Nothing survives a restart of the process (there were no processes); a new control plane on this
        same object gets the exits not acknowledged yet."""
        return self.poll(ack=ack)

    def log_path(self, job: str, replica: int = 0, attempt: int | None = None) -> Path | None:
        return None  # no processes, no output

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join(timeout=5)

    # -- waking the control plane --------------------------------------------------------------------
    def set_notify(self, fn: Callable[[], None] | None) -> None:
        """Call ``fn()`` whenever a replica's exit becomes due (from a daemon timer thread)."""
        with self._lock:
            self._notify = fn
            if fn is not None and self._timer is None:
                self._timer = threading.Thread(target=self._run_timer, name="fairpod-timed-executor", daemon=True)
                self._timer.start()
            self._lock.notify_all()

    def _run_timer(self) -> None:
        with self._lock:
            while not self._closed:
                while self._due and self._live.get(self._due[0][2:]) != self._due[0][0]:
                    heapq.heappop(self._due)  # drop stopped entries
                if not self._due:
                    self._lock.wait(1.0)
                    continue
                delay = self._due[0][0] - self.clock()
                if delay > 0:
                    self._lock.wait(min(delay, 1.0))
                    continue
                fn = self._notify
                if fn is not None:
                    fn()
                # wait for the poll that collects them (it notifies), not spinning on the same exits
                self._lock.wait(0.5)
