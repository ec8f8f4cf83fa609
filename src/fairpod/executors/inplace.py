"""The local executor's part for resilience: which replicas of an attempt started (gang readiness), which passed
their readiness probe (services: ``executors.readycheck``) and the restart of a failed replica in place, its
attempt's other replicas left running (``server/core/transitions/restarts.py``)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Protocol

from fairpod.executors import readycheck, state
from fairpod.executors.base import ExecutorError, JobLaunch


class _Local(Protocol):
    root: Path
    _mutex: threading.RLock
    _open: dict[Path, Any]

    def _spawn(self, job: JobLaunch, rank: int, spec: dict[str, Any]) -> None: ...

    def _fenced(self, what: str) -> None: ...

    def _spec(self, job: JobLaunch, rank: int, port: int) -> dict[str, Any]: ...

    def _free_port(self, taken: set[int]) -> int: ...

    def stop(self, job: str, attempt: int, grace_seconds: float, ranks: set[int] | None = None) -> None: ...


class InPlace:
    """Mixed into :class:`fairpod.executors.local.LocalExecutor` (capabilities ``Starting`` and
    ``RestartingInPlace`` of :mod:`fairpod.executors.base`, and ``Relocating``: a replica restarted on another node)."""

    def restart_replicas(self: _Local, job: JobLaunch) -> None:
        """Start ``job.replicas`` of the live attempt again in their run directories (the log appended to), on
        the attempt's MASTER_PORT; the attempt's other replicas are not touched."""
        with self._mutex:
            if not state.NAME_RE.fullmatch(job.job) or not job.command or not job.replicas:
                raise ExecutorError(f"job {job.job}: nothing to restart")
            ranks = {r.rank for r in job.replicas}
            mine = [r for r in list(self._open.values()) if r.job == job.job and r.attempt == job.attempt]
            if ranks & {r.rank for r in mine}:
                raise ExecutorError(f"job {job.job}: ranks {sorted(ranks)} have not ended (or their exits are "
                                    "not acknowledged yet)")
            adir = self.root / job.job / str(job.attempt)
            old = [state.read_json(adir / str(r) / state.LAUNCH) or {} for r in sorted(ranks)]
            ports = [int(o.get("master_port", 0)) for o in old] + [r.port for r in mine]
            port = next((p for p in ports if p), 0) or self._free_port(set())
            try:
                self._fenced("restart_replicas")
                for rep in job.replicas:
                    self._spawn(job, rep.rank, self._spec(job, rep.rank, port))
            except OSError as e:
                self.stop(job.job, job.attempt, 0.0, ranks)
                raise ExecutorError(f"cannot restart job {job.job} ranks {sorted(ranks)}: {e}") from None

    def cannot_relocate(self: _Local, rank: int) -> str | None:
        """Capability ``Relocating``: this host's nodes are virtual, a replica's run directory is its rank's, so a
        replica restarted on another node starts here as on its own, on the attempt's MASTER_ADDR/MASTER_PORT
        (rank 0 too: every node's address is this host's)."""
        return None

    def probed_ready(self: _Local, job: str, attempt: int) -> set[int]:
        """Ranks of the attempt whose last readiness probe, run by its supervisor in its sandbox, passed."""
        if not state.NAME_RE.fullmatch(job):
            return set()
        return readycheck.ready_ranks(self.root / job / str(attempt))

    def started_ranks(self: _Local, job: str, attempt: int) -> set[int]:
        """Ranks of the attempt whose supervisor started the process (or that ended since)."""
        adir = self.root / job / str(attempt)
        try:
            dirs = [d for d in adir.iterdir() if d.name.isdigit()]
        except OSError:
            return set()
        return {int(d.name) for d in dirs
                if any((d / name).exists() for name in (state.CHILD_PID, state.STATUS, state.REPORTED))}
