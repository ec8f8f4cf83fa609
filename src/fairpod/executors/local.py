"""The local executor: every replica is a process group on this machine, under its own supervisor.

A replica run lives in ``<root>/<job>/<attempt>/<rank>/`` (layout in :mod:`fairpod.executors.state`). The
supervisor (:mod:`fairpod.executors.supervisor`) is started in a new session, so it survives the control
plane; everything the executor knows is on disk, so a new ``LocalExecutor`` on the same root picks up where
the last one stopped. One executor at a time uses a root (an ``flock`` on ``<root>/.lock``). Its methods may
be called from several threads: those that change its runs take turns (``_serialized``), so the control plane
can start processes without holding its own lock while another thread stops a job.

Supervisors are forked from a fork server (:mod:`fairpod.executors.forkserver`, driven by
:mod:`fairpod.executors.forkclient`, started on first launch), a few milliseconds each instead of a new
interpreter's tens; ``FAIRPOD_FORKSERVER=0`` (or a fork server that cannot start) starts each as
``python -m fairpod.executors.supervisor``. ``set_notify(fn)`` has ``fn()`` called as soon as a supervisor
exits (pidfds, :mod:`fairpod.executors.exitwatch`), so the control plane collects exits without waiting a tick.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from fairpod import sandbox
from fairpod.executors import procs, standby, state
from fairpod.executors.base import ExecutorError, JobLaunch, ReplicaExit, replica_env
from fairpod.executors.exitwatch import ExitWatch
from fairpod.executors.fence import Fence
from fairpod.executors.forkclient import Forked, ForkServerClient
from fairpod.executors.hostgpus import ThisHostGpus
from fairpod.executors.inplace import InPlace
from fairpod.executors.spares import Spares

log = logging.getLogger("fairpod.executors.local")
STARTUP_TIMEOUT = 30.0  # a supervisor that has not written its PID file by then has failed
SERVICE_ENV = "FAIRPOD_SERVICE_PORTS"  # in a service's launch (server.core.transitions.serving.PORTS_ENV)
ORPHAN_WAIT = 5.0  # at adoption: how long a run without a supervisor PID file may still be starting
_SPAWNED: dict[Path, subprocess.Popen[bytes] | Forked] = {}  # supervisors this process started, by replica dir


def _reap() -> None:
    """Collect the supervisors of this process that have exited (no zombies). Those the fork server forked
    are its children, not ours: nothing to collect."""
    for p in _SPAWNED.values():
        if not isinstance(p, Forked):
            p.poll()


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _serialized(fn: Callable[Concatenate[LocalExecutor, _P], _R]) -> Callable[Concatenate[LocalExecutor, _P], _R]:
    """One call at a time per executor (its ``_mutex``) for the methods that change or read its runs."""

    @wraps(fn)
    def call(self: LocalExecutor, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._mutex:
            return fn(self, *args, **kwargs)

    return call


@dataclass(slots=True)
class _Run:
    """A replica run whose exit has not been reported yet."""

    dir: Path
    job: str
    attempt: int
    rank: int
    launched_at: float
    port: int
    started_mono: float | None = None  # time.monotonic() at its spawn by this executor (None: adopted)


class LocalExecutor(InPlace, Spares, ThisHostGpus, Fence):
    """Executor of replicas as local process groups; ``root`` is where runs are kept (``$FAIRPOD_HOME/runs``)."""

    name = "local"

    def __init__(
        self, root: str | Path, *, master_addr: str = "127.0.0.1", python: str | None = None,
        exclusive: bool = True,
    ) -> None:
        self.root = Path(root).absolute()
        self.master_addr = master_addr
        self.python = python or sys.executable
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.root / ".lock", "a")  # noqa: SIM115 - held until close()
        try:
            if exclusive:  # without: another guard keeps executors apart (the lease of fairpod up --ha)
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise ExecutorError(f"another executor is using {self.root}") from None
        self._mutex = threading.RLock()  # see _serialized
        self._open: dict[Path, _Run] = {}
        self._mine: set[Path] = set()  # replica dirs this executor launched (the others it adopted)
        self._watched: dict[Path, int] = {}  # replica dir -> its supervisor's pid, watched by a pidfd
        self._watch = ExitWatch()
        self._forkserver = ForkServerClient(self.python, self.root)
        self._spares: dict[Path, Forked] = {}  # replica dir -> its standby (fairpod.executors.spares)
        self._scan()

    # -- the Executor protocol -------------------------------------------------------------------------

    @_serialized
    def launch(self, job: JobLaunch) -> None:
        job.validate(workdir_here=True)
        live = self._live_attempt(job.job)
        if live is not None:
            raise ExecutorError(
                f"job {job.job} attempt {live} is still running; stop it and wait for its exits first"
            )
        try:
            Path(job.checkpoint_dir).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ExecutorError(
                f"cannot create checkpoint dir {job.checkpoint_dir}: {e.strerror or e}"
            ) from None
        port = self._free_port({r.port for r in self._open.values()})
        try:
            for rep in job.replicas:  # a relaunch of the same attempt: every replica's old run goes first, so
                self._clear(self.root / job.job / str(job.attempt) / str(rep.rank))  # a cut launch shows
            self._fenced("launch")
            for rep in job.replicas:
                self._spawn(job, rep.rank, self._spec(job, rep.rank, port))
        except OSError as e:
            self.stop(job.job, job.attempt, 0.0)
            raise ExecutorError(f"cannot start job {job.job}: {e}") from None

    @_serialized
    def stop(self, job: str, attempt: int, grace_seconds: float, ranks: set[int] | None = None) -> None:
        for run in list(self._open.values()):
            if run.job != job or run.attempt != attempt or (run.dir / state.STATUS).exists():
                continue
            if ranks is not None and run.rank not in ranks:
                continue
            self._fenced("stop")
            self._drop_spare(run.dir)
            # stop.json first, then the PID file: either we see the supervisor or it sees the request
            request = {"grace_seconds": max(0.0, grace_seconds), "requested_at": time.time()}
            state.write_json(run.dir / state.STOP, request)
            sup = state.read_pid(run.dir / state.SUPERVISOR_PID)
            if sup is not None and procs.alive(*sup):
                procs.signal_all([sup[0]], signal.SIGTERM)

    @_serialized
    def add_replicas(self, job: JobLaunch) -> None:
        """An elastic job grows: start the new ranks ``job.replicas`` of its live attempt on the attempt's port (a
        service's also when none of its replicas is live: all of them were restarting)."""
        if not state.NAME_RE.fullmatch(job.job) or not job.command or not job.replicas:
            raise ExecutorError(f"job {job.job}: nothing to add")
        live = [r for r in list(self._open.values()) if r.job == job.job and r.attempt == job.attempt
                and self._alive(r)]
        if not live and SERVICE_ENV not in job.env:  # a service's replica restarts alone (server.core.transitions.serving)
            raise ExecutorError(f"job {job.job} attempt {job.attempt} has no live replica to grow beside")
        if {r.rank for r in live} & {r.rank for r in job.replicas}:
            raise ExecutorError(f"job {job.job}: ranks {sorted(r.rank for r in job.replicas)} overlap live ones")
        port = min(r.port for r in live) if live else self._free_port({r.port for r in self._open.values()})
        try:
            self._fenced("add_replicas")
            for rep in job.replicas:
                self._spawn(job, rep.rank, self._spec(job, rep.rank, port))
        except OSError as e:
            self.stop(job.job, job.attempt, 0.0, {r.rank for r in job.replicas})
            raise ExecutorError(f"cannot grow job {job.job}: {e}") from None

    def stop_replicas(self, job: str, attempt: int, ranks: Sequence[int], grace_seconds: float) -> None:
        """An elastic job shrinks: SIGTERM (SIGKILL after the grace) to those ranks of the attempt only."""
        self.stop(job, attempt, grace_seconds, set(ranks))

    @_serialized
    def replica_ranks(self, job: str, attempt: int) -> set[int]:
        return {r.rank for r in list(self._open.values()) if r.job == job and r.attempt == attempt}

    @_serialized
    def poll(self, *, ack: bool = True) -> list[ReplicaExit]:
        _reap()
        exits = [ex for run in list(self._open.values()) if (ex := self._check(run)) is not None]
        if ack:
            self.ack(exits)
        return sorted(exits, key=lambda e: (e.ended_at, e.job, e.rank))

    @_serialized
    def ack(self, exits: Sequence[ReplicaExit]) -> None:
        for ex in exits:
            rdir = self.root / ex.job / str(ex.attempt) / str(ex.rank)
            if self._open.get(rdir) is None:
                continue  # acknowledged before (or never ours)
            state.write_atomic(rdir / state.REPORTED, f"{time.time()}\n")
            self._open.pop(rdir, None)
            self._watched.pop(rdir, None)
            _SPAWNED.pop(rdir, None)

    @_serialized
    def running(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for run in list(self._open.values()):
            if self._alive(run):
                out[run.job] = max(out.get(run.job, run.attempt), run.attempt)
        return out

    def _alive(self, run: _Run) -> bool:
        return not (run.dir / state.STATUS).exists() and self._check(run) is None

    def _live_attempt(self, job: str) -> int | None:
        """The newest live attempt of ``job`` (only that job's runs are looked at: a launch costs the same
        however many other jobs run)."""
        attempts = [run.attempt for run in list(self._open.values()) if run.job == job and self._alive(run)]
        return max(attempts) if attempts else None

    @_serialized
    def adopt(self, *, ack: bool = True) -> list[ReplicaExit]:
        self._scan()
        self._drop_unstarted()
        return self.poll(ack=ack)

    def _drop_unstarted(self) -> None:
        """Launches a previous executor did not finish (the control plane died while starting them) never ran
        as a whole, and the control plane never recorded them as started: they are undone here, not adopted
        (nor reported as failed), and the control plane launches them again. A run whose ``launch.json`` was
        written but whose supervisor never started is dropped; when that leaves a launch of several replicas
        short of one (or one was never written), the replicas of that launch that did start are killed and
        dropped too. A launch is the ranks started together (``launch_ranks``): an attempt's first start, or the
        new ranks of an elastic job's growth (the ranks that ran before it are not touched). A supervisor forked just before the crash gets ``ORPHAN_WAIT`` seconds to write its PID."""
        inherited = [r for r in self._open.values() if r.dir not in self._mine]
        orphans = [r for r in inherited
                   if not (r.dir / state.SUPERVISOR_PID).exists() and not (r.dir / state.STATUS).exists()]
        deadline = time.monotonic() + ORPHAN_WAIT
        while orphans and time.monotonic() < deadline:
            time.sleep(0.05)
            orphans = [r for r in orphans if not (r.dir / state.SUPERVISOR_PID).exists()]
        undo = {r.dir for r in orphans}
        # the replicas started together (a launch: ranks 0..world-1; a growth of an elastic job: its new ranks)
        # stand or fall together; a cut growth leaves the ranks that ran before it alone
        launches: dict[tuple[str, int, tuple[int, ...]], list[_Run]] = {}
        for r in inherited:
            spec = state.read_json(r.dir / state.LAUNCH) or {}
            ranks = spec.get("launch_ranks") or range(int(spec.get("world_size", 1)))
            launches.setdefault((r.job, r.attempt, tuple(ranks)), []).append(r)
        for (job, attempt, ranks), runs in launches.items():
            adir = self.root / job / str(attempt)
            written = {int(d.name) for d in adir.iterdir() if d.name.isdigit()
                       and ((d / state.LAUNCH).exists() or (d / state.REPORTED).exists())}
            if any(r.dir in undo for r in runs) or not set(ranks) <= written:
                undo.update(r.dir for r in runs)
        for r in inherited:
            if r.dir not in undo:
                continue
            log.warning("replica %s attempt %d rank %d: its launch was cut short by a crash; undone",
                        r.job, r.attempt, r.rank)
            for name in (state.SUPERVISOR_PID, state.CHILD_PID):
                pid = state.read_pid(r.dir / name)
                if pid is not None and procs.alive(*pid):
                    if name == state.CHILD_PID:
                        procs.signal_group(pid[0], signal.SIGKILL)
                    procs.signal_all([pid[0]], signal.SIGKILL)
            for name in (state.LAUNCH, state.SECRET, state.STATUS, state.SUPERVISOR_PID, state.CHILD_PID):
                (r.dir / name).unlink(missing_ok=True)
            self._open.pop(r.dir, None)
            self._watched.pop(r.dir, None)

    def log_path(self, job: str, replica: int = 0, attempt: int | None = None) -> Path | None:
        return state.log_path(self.root, job, replica, attempt)

    def follow(
        self, job: str, replica: int = 0, attempt: int | None = None, poll_interval: float = 0.25
    ) -> Iterator[str]:
        """Text of a replica's log as it is written, until that replica has ended (``get-logs --follow``)."""
        return state.follow(self.root, job, replica, attempt, poll_interval)

    @_serialized
    def discard(self, job: str) -> None:
        """Delete the run files (logs, status) of a finished job that retention deleted; never of a live one."""
        if not state.NAME_RE.fullmatch(job) or any(run.job == job for run in self._open.values()):
            return
        shutil.rmtree(self.root / job, ignore_errors=True)

    def set_notify(self, fn: Callable[[], None] | None) -> None:
        """Call ``fn()`` (from a watcher thread) as soon as a supervisor of this executor exits, so that the
        control plane collects the exit at once rather than on its next tick. Optional (Linux pidfds)."""
        if fn is not None and self._watch.start(fn):
            for run in list(self._open.values()):  # adopted supervisors
                sup = state.read_pid(run.dir / state.SUPERVISOR_PID)
                if sup is not None and procs.alive(*sup) and self._watch.add(sup[0]):
                    self._watched[run.dir] = sup[0]

    def close(self) -> None:
        self._watch.stop()
        self._forkserver.close()
        _reap()
        for rdir in self._open:
            if (p := _SPAWNED.get(rdir)) is not None and p.returncode is not None:
                del _SPAWNED[rdir]
        self._open.clear()
        self._watched.clear()
        if not self._lock.closed:
            self._lock.close()  # releases the flock

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ---------------------------------------------------------------------------------------

    def _spec(self, job: JobLaunch, rank: int, port: int) -> dict[str, Any]:
        rep = next(r for r in job.replicas if r.rank == rank)
        return {
            "job": job.job,
            "team": job.team,
            "attempt": job.attempt,
            "rank": rank,
            "world_size": job.world_size,
            "node": rep.node,
            "command": list(job.command),
            "workdir": job.workdir or os.getcwd(),
            "grace_seconds": job.grace_seconds,
            "run_as": job.run_as,
            "umask": job.umask,
            "limits": sandbox.limits_of(rep.mcpu, rep.mib, rep.accelerators if rep.real_gpus else None),
            "env": replica_env(job, rep, self.master_addr, port),
            "master_port": port,
            "launched_at": time.time(),
            "container": job.container,
            "readiness": job.readiness,
            "mounts_allow": list(job.mounts_allow),
            "named_workdir": job.workdir is not None,
            "log_max_bytes": job.log_max_bytes,
            "launch_ranks": [r.rank for r in job.replicas],  # started together: a launch, or a growth's new ranks
            "spare": job.spare,  # a standby with a spare process beside it (fairpod.executors.standby)
        }

    def _spawn(self, job: JobLaunch, rank: int, spec: dict[str, Any]) -> None:
        rdir = self.root / job.job / str(job.attempt) / str(rank)
        self._clear(rdir)
        state.write_launch(rdir, spec)
        self._open[rdir] = _Run(rdir, job.job, job.attempt, rank, spec["launched_at"], spec["master_port"],
                                time.monotonic())
        self._mine.add(rdir)
        forked = self._take_spare(rdir) or self._forkserver.spawn(rdir, rdir / state.SUPERVISOR_LOG)
        if forked is not None:
            _SPAWNED[rdir] = forked
        else:  # no fork server: a new interpreter
            with open(rdir / state.SUPERVISOR_LOG, "ab") as slog:
                _SPAWNED[rdir] = subprocess.Popen(
                    [self.python, "-m", "fairpod.executors.supervisor", str(rdir)],
                    cwd=rdir,
                    stdin=subprocess.DEVNULL,
                    stdout=slog,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # not killed with the control plane's session or process group
                )
        self._watched.pop(rdir, None)
        if self._watch.add(_SPAWNED[rdir].pid):
            self._watched[rdir] = _SPAWNED[rdir].pid
        self._arm_spare(rdir, spec)

    @staticmethod
    def _clear(rdir: Path) -> None:
        """A fresh run in ``rdir`` (a relaunch of the same attempt keeps only the log, appended to)."""
        rdir.mkdir(parents=True, exist_ok=True)
        for name in (state.LAUNCH, state.STATUS, state.REPORTED, state.STOP, state.SUPERVISOR_PID, state.CHILD_PID):
            (rdir / name).unlink(missing_ok=True)

    def _scan(self) -> None:
        """Find every replica run on disk whose exit has not been reported."""
        for jdir in self.root.iterdir():
            if not jdir.is_dir() or not state.NAME_RE.fullmatch(jdir.name):
                continue
            for adir in jdir.iterdir():
                if not adir.name.isdigit() or not adir.is_dir():
                    continue
                for rdir in adir.iterdir():
                    if rdir in self._open or not rdir.name.isdigit() or (rdir / state.REPORTED).exists():
                        continue
                    spec = state.read_json(rdir / state.LAUNCH)
                    if spec is not None:
                        launched, port = float(spec.get("launched_at", 0)), int(spec.get("master_port", 0))
                        self._open[rdir] = _Run(
                            rdir, jdir.name, int(adir.name), int(rdir.name), launched, port
                        )

    def _check(self, run: _Run) -> ReplicaExit | None:
        """The exit of a run, or None while it is alive (or its supervisor is still starting). A supervisor
        whose pidfd has not fired is alive: its run is not read (its exit is collected once it has exited;
        the watcher wakes the control plane then)."""
        pid = self._watched.get(run.dir)
        if pid is not None and self._watch.watching(pid):
            return None
        if (st := state.read_json(run.dir / state.STATUS)) is not None:
            return self._exit(run, st)
        sup = state.read_pid(run.dir / state.SUPERVISOR_PID)
        if sup is None:
            spawned = _SPAWNED.get(run.dir)
            if spawned is None or spawned.poll() is None:  # still starting, for all we know
                age = (time.monotonic() - run.started_mono if run.started_mono is not None  # a wall step moves
                       else time.time() - run.launched_at)  # not the age of a start seen here
                if age < STARTUP_TIMEOUT:
                    return None
        if sup is not None and procs.alive(*sup):
            return None
        if (st := state.read_json(run.dir / state.STATUS)) is not None:  # it may have just finished
            return self._exit(run, st)
        if sup is None:
            reason = "supervisor failed to start"
            try:
                tail = (run.dir / state.SUPERVISOR_LOG).read_text(errors="replace").strip().splitlines()[-1:]
            except OSError:
                tail = []
            reason += f": {tail[0]}" if tail else ""
        else:
            reason = "supervisor died unexpectedly; replica processes killed"
            child = state.read_pid(run.dir / state.CHILD_PID)
            if child is not None and (procs.start_time(child[0]) in (None, child[1])):
                procs.signal_group(child[0], signal.SIGKILL)  # the group id outlives its leader
            for box in standby.boxes(run.dir):  # and what left the group, with its cgroup (its spares' too)
                sandbox.discard(run.job, run.attempt, run.rank, box)
        st = {"returncode": None, "signal": None, "reason": reason, "ended_at": time.time()}
        with contextlib.suppress(OSError):  # a full disk: found the same way again until the store has it
            state.write_json(run.dir / state.STATUS, st)
        return self._exit(run, st)

    @staticmethod
    def _exit(run: _Run, st: dict[str, Any]) -> ReplicaExit:
        return state.exit_of(run.job, run.attempt, run.rank, st)

    def _free_port(self, taken: set[int]) -> int:
        for _ in range(50):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((self.master_addr, 0))
                port = int(s.getsockname()[1])
            if port not in taken:
                return port
        raise ExecutorError("no free port for MASTER_PORT")
