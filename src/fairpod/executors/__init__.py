"""Executors: the interface between the control plane and the processes that run jobs.

The control plane describes one attempt of a job with :class:`JobLaunch` (one :class:`ReplicaLaunch` per
replica) and drives an :class:`Executor`::

    ex = LocalExecutor(home / "runs")             # one executor per root at a time
    for e in ex.adopt(): ...                      # at start-up: exits that happened while we were down
    ex.running()                                  # {job: attempt} of live replicas (adopted ones included)
    ex.launch(JobLaunch(job="j", team="t", attempt=0, command=["python", "train.py"],
                        checkpoint_dir=str(home / "ckpt" / "j"), grace_seconds=30,
                        replicas=(ReplicaLaunch(rank=0, node="n0", accelerators=(0, 1), real_gpus=True),)))
    ex.stop("j", 0, grace_seconds=30)             # SIGTERM now, SIGKILL after the grace; returns at once
    for e in ex.poll(): ...                       # ReplicaExit(job, attempt, rank, returncode, signal, reason)
    ex.log_path("j", replica=0)                   # Path of the latest attempt's output.log
    ex.follow("j", 0)                             # iterator of new log text until the replica ends

Guarantees:

- ``launch`` returns once the supervisors are spawned, without waiting for them; it raises
  :class:`ExecutorError` (a message for the user) on a bad launch or if an attempt of the job still runs.
  A command that cannot start is not an error of ``launch``: the replica ends with a reason such as
  ``"command not found: x"`` (returncode 127).
- Each replica's exit is returned by ``poll``/``adopt`` exactly once, also across restarts of the control
  plane (a ``reported`` marker is kept on disk). Exits are final: all of the replica's processes are gone.
- A replica's environment: the executor's own, then ``JobLaunch.env``, then ``FAIRPOD_JOB``, ``FAIRPOD_TEAM``,
  ``FAIRPOD_NODE``, ``FAIRPOD_ACCELERATORS`` (e.g. "0,1"), ``FAIRPOD_CHECKPOINT_DIR``, ``FAIRPOD_RESTART_COUNT``
  (= attempt), ``RANK``/``NODE_RANK``, ``WORLD_SIZE``/``NNODES``, ``MASTER_ADDR``, ``MASTER_PORT`` (free, one per
  attempt) and, for real GPUs only, ``CUDA_VISIBLE_DEVICES``. ``PYTHONUNBUFFERED=1`` unless the job sets it.
- Stop kills the whole tree (process group, then every descendant, also ``setsid`` ones); when the command
  ends on its own, what it left behind is stopped too before the exit is recorded.
- Relaunching an attempt whose replicas all ended starts fresh runs in the same directories; the log is
  appended to (each run starts with a ``==== fairpod:`` header); a new attempt number gets new files.
- If a supervisor itself is killed (kill -9), the next ``poll`` kills the command's process group and reports
  ``"supervisor died unexpectedly; replica processes killed"``; ``setsid`` descendants are lost in that case.
- Accelerators are not checked for overlap: giving disjoint devices to live jobs is the caller's job.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing would cost the supervisor ~7 ms
if TYPE_CHECKING:
    from typing import Any

    from fairpod.executors.base import (
        Executor,
        ExecutorError,
        JobLaunch,
        ReplicaExit,
        ReplicaLaunch,
        replica_env,
    )
    from fairpod.executors.local import LocalExecutor
    from fairpod.executors.logs import follow_log

# Imported on first use, so that a replica's supervisor (python -m fairpod.executors.supervisor, one process
# per replica) loads only what it needs: this package's eager imports were most of its start-up time.
_LAZY = {
    "Executor": "base", "ExecutorError": "base", "JobLaunch": "base", "ReplicaExit": "base",
    "ReplicaLaunch": "base", "replica_env": "base", "LocalExecutor": "local", "follow_log": "logs",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


__all__ = [
    "Executor",
    "ExecutorError",
    "JobLaunch",
    "LocalExecutor",
    "ReplicaExit",
    "ReplicaLaunch",
    "follow_log",
    "replica_env",
]
