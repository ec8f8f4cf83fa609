"""Replicas of the local executor that are alive under a state directory, read from their run directories
(``<runs>/<job>/<attempt>/<rank>/``, :mod:`fairpod.executors.state`) without a running control plane: what
``fairpod restore`` must not leave unmanaged."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fairpod.executors import procs, state


@dataclass(frozen=True, slots=True)
class LiveReplica:
    job: str  # the executor's job key, ``<name>-<id>``
    attempt: int
    rank: int
    pid: int  # its supervisor's


def live_replicas(runs: Path) -> list[LiveReplica]:
    """Every replica under ``runs`` whose supervisor (or command) still runs and that has no exit recorded."""
    out: list[LiveReplica] = []
    for launch in sorted(runs.glob(f"*/*/*/{state.LAUNCH}")):
        rdir = launch.parent
        if (rdir / state.STATUS).exists() or not (rdir.parent.name.isdigit() and rdir.name.isdigit()):
            continue
        for name in (state.SUPERVISOR_PID, state.CHILD_PID):
            rec = state.read_pid(rdir / name)
            if rec is not None and procs.alive(*rec):
                out.append(LiveReplica(rdir.parent.parent.name, int(rdir.parent.name), int(rdir.name), rec[0]))
                break
    return out
