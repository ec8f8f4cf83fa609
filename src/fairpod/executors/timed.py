"""The timed executor — FOR BENCHMARKS AND TESTS ONLY: it runs no processes at all.

Each replica of a launched job "runs" for the job's duration and then ends with exit code 0, as reported by
:meth:`TimedExecutor.poll`. The duration is the job's ``FAIRPOD_BENCH_DURATION`` environment variable
(seconds), else the ``N`` of a command ``sleep N`` (also ``sh -c "sleep N"``), else 0. ``stop`` ends the
replicas at once, as if SIGTERM had killed them.

With a ``root`` (``fairpod up --executor timed`` gives its runs directory), what it runs survives a restart of
the control plane as real replicas do under the local and Ray executors: every launch, stop and acknowledged
exit is appended to ``root/timed.journal``, and a new executor on the same root reads it back, so a restarted
control plane adopts the replicas still "running" and gets the exits it had not acknowledged (those due while
it was down end at their due time, exit 0). The journal is rewritten with only what is live whenever it has
grown to several times that. Without a root nothing is kept: a new control plane on the *same* executor
object (as the in-process tests build) adopts its live replicas and unacknowledged exits.

It exists to measure the control plane alone (API, store, engine, reconcile loop) at rates that real
processes cannot reach on a small machine: ``fairpod up --executor timed`` (see ``benchmarks/``). Never use
it to run real work.
"""

from __future__ import annotations

import heapq
import logging
import os
import re
import shlex
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fairpod.executors.base import ExecutorError, JobLaunch, ReplicaExit
from fairpod.executors.hostgpus import ThisHostMig

DURATION_ENV = "FAIRPOD_BENCH_DURATION"
JOURNAL = "timed.journal"
COMPACT_MIN = 10_000  # journal lines before a rewrite is considered (then when 4x the live replicas)
log = logging.getLogger(__name__)
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


def _exited(key: tuple[str, int, int], at: float) -> ReplicaExit:
    """The exit of a replica ``(job, attempt, rank)`` that ended on its own at ``at``."""
    return ReplicaExit(job=key[0], attempt=key[1], rank=key[2], returncode=0, signal=None, reason="exited 0",
                       ended_at=at)


def _stop_exit(key: tuple[str, int, int], due: float, at: float) -> ReplicaExit:
    """The exit of a replica due at ``due`` and stopped at ``at``: if it had ended on its own already, exit 0 then
    (as a real replica would report), else killed by SIGTERM at ``at``."""
    if due < at:
        return _exited(key, due)
    return ReplicaExit(job=key[0], attempt=key[1], rank=key[2], returncode=None, signal=int(signal.SIGTERM),
                       reason="killed by SIGTERM", ended_at=at)


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
        self._of_job: dict[str, set[tuple[str, int, int]]] = {}  # job -> its keys in _live (no scan of all)
        self._ended: list[ReplicaExit] = []  # stopped replicas, reported by the next poll
        self._unacked: dict[tuple[str, int, int], ReplicaExit] = {}  # polled, not acknowledged yet
        self._seq = 0
        self._notify: Callable[[], None] | None = None
        self._closed = False
        self._timer: threading.Thread | None = None
        self._stopped: dict[tuple[str, int, int], tuple[float, float]] = {}  # stopped, exit not acknowledged yet:
        # (due, stopped at) for the journal
        self._journal: Any = None  # the open journal (a root given), appended to under the lock
        self._lines = 0  # lines in the journal
        if self.root is not None:
            self._replay()

    # -- the Executor protocol -----------------------------------------------------------------------
    def launch(self, job: JobLaunch) -> None:
        if not job.replicas:
            raise ExecutorError(f"job {job.job} has no replicas")
        duration = job_duration(job)
        with self._lock:
            if self._of_job.get(job.job):
                raise ExecutorError(f"job {job.job} is still running; stop it and wait for its exits first")
            due = self.clock() + duration
            try:
                self._write("".join(f"L {due!r} {job.attempt} {rep.rank} {job.job}\n" for rep in job.replicas))
            except OSError as e:
                raise ExecutorError(f"job {job.job}: could not record its launch in {self._path()}: {e}") from None
            for rep in job.replicas:
                self._seq += 1
                heapq.heappush(self._due, (due, self._seq, job.job, job.attempt, rep.rank))
                self._add((job.job, job.attempt, rep.rank), due)
            self._lock.notify_all()

    def stop(self, job: str, attempt: int, grace_seconds: float) -> None:
        with self._lock:
            now = self.clock()
            keys = sorted(k for k in self._of_job.get(job, ()) if k[1] == attempt)
            self._write_quietly("".join(f"S {now!r} {attempt} {k[2]} {job}\n" for k in keys))
            for key in keys:
                due = self._drop(key)  # its heap entry is dropped lazily
                self._stopped[key] = (due, now)
                self._ended.append(_stop_exit(key, due, now))
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
                self._drop((job, attempt, rank))
                out.append(_exited((job, attempt, rank), due))
            for e in out:
                self._unacked[(e.job, e.attempt, e.rank)] = e
            out = sorted(self._unacked.values(), key=lambda e: (e.ended_at, e.job, e.rank))
            if ack:
                self._forget(list(self._unacked))
            self._lock.notify_all()  # the timer looks for the next due exit
        return out

    def ack(self, exits: Sequence[ReplicaExit]) -> None:
        with self._lock:
            self._forget([(e.job, e.attempt, e.rank) for e in exits])

    def running(self) -> dict[str, int]:
        with self._lock:
            out: dict[str, int] = {}
            for job, attempt, _ in self._live:
                out[job] = max(out.get(job, attempt), attempt)
            return out

    def adopt(self, *, ack: bool = True) -> list[ReplicaExit]:
        """The exits not acknowledged yet: this object's, and with a root those its journal held when it was
        built (its live replicas were taken in then)."""
        return self.poll(ack=ack)

    def log_path(self, job: str, replica: int = 0, attempt: int | None = None) -> Path | None:
        return None  # no processes, no output

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()
            if self._journal is not None:
                self._journal.close()
                self._journal = None
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

    def _add(self, key: tuple[str, int, int], due: float) -> None:
        self._live[key] = due
        self._of_job.setdefault(key[0], set()).add(key)

    def _drop(self, key: tuple[str, int, int]) -> float:
        due = self._live.pop(key)
        keys = self._of_job[key[0]]
        keys.discard(key)
        if not keys:
            del self._of_job[key[0]]
        return due

    # -- the journal (with a root) -------------------------------------------------------------------
    def _path(self) -> Path:
        assert self.root is not None
        return self.root / JOURNAL

    def _write(self, text: str) -> None:
        """Append ``text`` (whole lines) to the journal, flushed to the OS (a killed control plane loses
        nothing of it); with the lock held. No root: nothing."""
        if self.root is None or self._closed or not text:
            return
        if self._journal is None:
            self.root.mkdir(parents=True, exist_ok=True)
            self._journal = open(self._path(), "a", encoding="utf-8")  # noqa: SIM115 - kept open, closed by close()
        self._journal.write(text)
        self._journal.flush()
        self._lines += text.count("\n")

    def _forget(self, keys: list[tuple[str, int, int]]) -> None:
        """Exits acknowledged: gone from memory and (``A`` lines) from the journal; with the lock held."""
        gone = []
        for key in keys:
            if self._unacked.pop(key, None) is not None:
                self._stopped.pop(key, None)
                gone.append(f"A 0 {key[1]} {key[2]} {key[0]}\n")
        if gone:
            self._write_quietly("".join(gone))
            if self._lines > max(COMPACT_MIN, 4 * (len(self._live) + len(self._unacked) + len(self._ended))):
                self._compact()

    def _write_quietly(self, text: str) -> None:
        try:
            self._write(text)
        except OSError as e:  # the replica ends anyway; a restart would take it for still live
            log.warning("timed executor: could not write its journal %s: %s", self._path(), e)

    def _replay(self) -> None:
        """What the journal of a previous executor on this root says: replicas live (their due times),
        stopped and exited ones whose exits were not acknowledged (reported by the next poll). Lines that do
        not parse (a write cut short) are skipped. Then the journal is rewritten with only that."""
        try:
            text = self._path().read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except OSError as e:
            raise ExecutorError(f"timed executor: cannot read its journal {self._path()}: {e}") from None
        live: dict[tuple[str, int, int], float] = {}
        stopped: dict[tuple[str, int, int], float] = {}
        for line in text.splitlines():
            try:
                kind, when, attempt, rank, job = line.split(" ", 4)
                key = (job, int(attempt), int(rank))
                if kind == "L":
                    live[key] = float(when)
                elif kind == "S" and key in live:
                    stopped[key] = float(when)
                elif kind == "A":
                    live.pop(key, None)
                    stopped.pop(key, None)
            except ValueError:
                continue
        now = self.clock()
        for key, due in live.items():
            if key in stopped:
                self._stopped[key] = (due, stopped[key])
                self._ended.append(_stop_exit(key, due, stopped[key]))
            elif due <= now:  # ended while no executor looked: exit 0 at its due time
                self._ended.append(_exited(key, due))
            else:
                self._seq += 1
                heapq.heappush(self._due, (due, self._seq, *key))
                self._add(key, due)
        self._compact()

    def _compact(self) -> None:
        """Rewrite the journal with only what is live or not acknowledged (atomically); with the lock held."""
        if self.root is None:
            return
        lines = [f"L {due!r} {k[1]} {k[2]} {k[0]}\n" for k, due in self._live.items()]
        lines += [f"L {e.ended_at!r} {e.attempt} {e.rank} {e.job}\n" for e in [*self._ended, *self._unacked.values()]
                  if (e.job, e.attempt, e.rank) not in self._stopped]  # ended on their own, not acknowledged
        lines += [f"L {due!r} {k[1]} {k[2]} {k[0]}\nS {at!r} {k[1]} {k[2]} {k[0]}\n"
                  for k, (due, at) in self._stopped.items()]
        tmp = self._path().with_suffix(".tmp")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp.write_text("".join(lines), encoding="utf-8")
            if self._journal is not None:
                self._journal.close()
                self._journal = None
            os.replace(tmp, self._path())
            self._lines = sum(line.count("\n") for line in lines)
        except OSError as e:
            log.warning("timed executor: could not rewrite its journal %s: %s", self._path(), e)
