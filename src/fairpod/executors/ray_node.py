"""The node side of the Ray executor: the replica agent (a Ray actor, one per replica) and its supervisor.

This module imports no Ray at load time: :mod:`fairpod.executors.ray` turns :class:`ReplicaAgent` into a Ray
actor class, and ``python -m fairpod.executors.ray_node supervise DIR`` (the supervisor) must start fast.

On its node, the agent of replica ``rank`` of attempt ``a`` of job ``j`` keeps one *run directory*
``<node_dir>/<namespace>/<j>/<a>/<rank>-<run>/`` with the local executor's layout
(:mod:`fairpod.executors.state`), and:

1. ``start``: builds the replica's environment with :func:`fairpod.executors.base.replica_env` (accelerators =
   the GPU ids Ray assigned to the actor, so ``CUDA_VISIBLE_DEVICES`` matches Ray's assignment), writes
   ``launch.json`` and starts a :class:`GuardedSupervisor` *outside* the actor's process tree (a double
   fork): Ray SIGKILLs an actor's direct children when the actor's process exits, which would leave the
   command's ``setsid`` descendants running. The supervisor is the local executor's, plus one rule: when the
   agent's process is gone (actor killed, node lost), it stops the replica as if a stop had been asked
   (SIGTERM to the whole tree, SIGKILL after the grace period);
2. ``sync(offset)``: the new bytes of ``output.log`` and, once the replica has ended, its exit;
3. ``stop(grace)``: ``stop.json`` and SIGTERM to the supervisor (exactly as the local executor);
4. ``finish``: deletes the run directory once the control plane has the whole log and the exit.

The replica's base environment is the one its Ray node (the raylet) was started with, as the local
executor's is the control plane's: the variables Ray sets for its own worker processes are left out.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from fairpod.executors import procs, state
from fairpod.executors.base import JobLaunch, ReplicaLaunch, replica_env
from fairpod.executors.supervisor import Supervisor

STARTUP_TIMEOUT = 30.0  # a supervisor that has not written its PID file by then has failed
OWNER = "owner"  # launch.json: [pid, start_time] of the agent's process; the supervisor watches it
RAY_NODE_ID_ENV = "FAIRPOD_RAY_NODE_ID"
# variables Ray sets for its worker processes, not for the programs they start
_RAY_WORKER_ENV = ("RAY_JOB_ID", "RAY_RAYLET_PID", "RAY_CLIENT_MODE", "RAY_LD_PRELOAD_ON_WORKERS",
                   "PYTHONBREAKPOINT", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
# started in a new session by the agent: forks, and the child (not a child of the agent) runs the supervisor
_DETACH = ("import os, sys\n"
           "if os.fork():\n"
           "    os._exit(0)\n"
           "os.execv(sys.executable, [sys.executable, '-m', 'fairpod.executors.ray_node', 'supervise', sys.argv[1]])\n")


class GuardedSupervisor(Supervisor):
    """The local executor's supervisor that also stops the replica once the agent's process has gone."""

    def __init__(self, rdir: Path) -> None:
        super().__init__(rdir)
        owner = self.spec.get(OWNER)
        self.owner: tuple[int, int | None] | None = None
        if isinstance(owner, list) and len(owner) == 2:
            self.owner = (int(owner[0]), None if owner[1] is None else int(owner[1]))
        self.owner_gone = False

    def _stop_requested(self) -> bool:
        if super()._stop_requested():
            return True
        if self.owner is not None and not procs.alive(*self.owner):
            if not self.owner_gone:
                self.owner_gone = True
                self.note("the replica's Ray actor is gone (node lost or actor killed)")
            return True
        return False


def supervise(rdir: Path) -> int:
    sup = GuardedSupervisor(rdir)
    try:
        result = sup.run()
    except Exception as e:
        traceback.print_exc()
        sup.abort()
        result = {"returncode": None, "signal": None, "reason": f"supervisor error: {e}"}
    sup.finish(result)
    return 0


def base_env() -> dict[str, str]:
    """The environment of this node's raylet (what the node was started with), else ours minus Ray's own."""
    raylet = os.environ.get("RAY_RAYLET_PID", "")
    if raylet.isdigit():
        try:
            raw = Path(f"/proc/{raylet}/environ").read_bytes()
            env = dict(kv.split("=", 1) for kv in raw.decode("utf-8", "replace").split("\0") if "=" in kv)
            if env:
                return env
        except OSError:
            pass
    return {k: v for k, v in os.environ.items() if k not in _RAY_WORKER_ENV}


def _status(code: int | None, reason: str) -> dict[str, Any]:
    return {"returncode": code, "signal": None, "reason": reason, "ended_at": time.time()}


class ReplicaAgent:
    """One replica on one Ray node (made a Ray actor by :mod:`fairpod.executors.ray`; see the module doc).

    Runs with ``max_concurrency > 1``: ``stop`` and ``sync`` must never wait behind another call. ``start``
    and ``stop`` may arrive in either order; a stop that comes first makes ``start`` record
    ``"stopped before start"`` instead of starting anything.
    """

    def __init__(self, rdir: str) -> None:
        self.dir = Path(rdir)
        self.lock = threading.Lock()
        self.stop_grace: float | None = None
        self.started_at: float | None = None
        self.spawned = False

    # -- calls from the control plane ------------------------------------------------------------
    def free_port(self, host: str) -> int:
        """A free TCP port on this node (the job's MASTER_PORT, when this is its rank-0 replica)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, 0))
            except OSError:
                s.bind(("", 0))
            return int(s.getsockname()[1])

    def start(self, job: JobLaunch, rep: ReplicaLaunch, master_addr: str, master_port: int,
              default_workdir: str | None) -> dict[str, Any]:
        """Start the replica's supervisor (returns at once); the exit comes through ``sync``."""
        import ray

        gpus = [str(g) for g in ray.get_gpu_ids()]
        with self.lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.started_at = time.time()
            if self.spawned or (self.dir / state.STATUS).exists():
                return {"gpus": gpus}
            if self.stop_grace is not None:
                state.write_json(self.dir / state.STATUS, _status(None, "stopped before start"))
                return {"gpus": gpus}
            try:
                Path(job.checkpoint_dir).mkdir(parents=True, exist_ok=True)
            except OSError as e:
                why = f"cannot create checkpoint dir {job.checkpoint_dir}: {e.strerror or e}"
                state.write_json(self.dir / state.STATUS, _status(126, why))
                return {"gpus": gpus}
            accel = tuple(int(g) for g in gpus) if all(g.isdigit() for g in gpus) else ()
            env = replica_env(job, replace(rep, accelerators=accel, real_gpus=True), master_addr, master_port)
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)  # Ray's own ids, also when they are not numbers
            env["FAIRPOD_ACCELERATORS"] = ",".join(gpus)
            env[RAY_NODE_ID_ENV] = ray.get_runtime_context().get_node_id()
            workdir = job.workdir
            if workdir is None:
                workdir = default_workdir if default_workdir and os.path.isdir(default_workdir) else str(Path.home())
            me = os.getpid()
            spec = {
                "job": job.job, "team": job.team, "attempt": job.attempt, "rank": rep.rank,
                "world_size": job.world_size, "node": rep.node, "command": list(job.command), "workdir": workdir,
                "grace_seconds": job.grace_seconds, "run_as": job.run_as, "env": env, "master_port": master_port,
                "launched_at": self.started_at, OWNER: [me, procs.start_time(me)],
            }  # fmt: skip
            state.write_launch(self.dir, spec)
            with open(self.dir / state.SUPERVISOR_LOG, "ab") as slog:
                subprocess.run([sys.executable, "-c", _DETACH, str(self.dir)], cwd=self.dir, env=base_env(),
                               stdin=subprocess.DEVNULL, stdout=slog, stderr=subprocess.STDOUT,
                               start_new_session=True, timeout=60, check=False)
            self.spawned = True
        return {"gpus": gpus}

    def stop(self, grace: float) -> None:
        """SIGTERM to the replica now, SIGKILL after ``grace`` seconds (a second stop may shorten it)."""
        with self.lock:
            self.stop_grace = max(0.0, grace) if self.stop_grace is None else min(self.stop_grace, max(0.0, grace))
            if not self.spawned or (self.dir / state.STATUS).exists():
                return
            state.write_json(self.dir / state.STOP, {"grace_seconds": self.stop_grace, "requested_at": time.time()})
            sup = state.read_pid(self.dir / state.SUPERVISOR_PID)
            if sup is not None and procs.alive(*sup):
                procs.signal_all([sup[0]], signal.SIGTERM)

    def sync(self, offset: int, limit: int) -> dict[str, Any]:
        """Log bytes from ``offset`` (at most ``limit``), the log's size, and the exit once there is one."""
        st = self._check()  # before reading the log: the supervisor writes status.json after its last output
        data = b""
        size = 0
        try:
            with open(self.dir / state.OUTPUT, "rb") as f:
                size = f.seek(0, 2)
                if offset < size:
                    f.seek(offset)
                    data = f.read(limit)
        except FileNotFoundError:
            pass
        return {"data": data, "size": size, "status": st}

    def finish(self) -> None:
        """The control plane has everything: remove the run directory (the actor is killed next)."""
        with self.lock:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers -----------------------------------------------------------------------------------
    def _check(self) -> dict[str, Any] | None:
        """The replica's exit, or None while it runs (or its supervisor is still starting)."""
        with self.lock:
            if (st := state.read_json(self.dir / state.STATUS)) is not None:
                return st
            if not self.spawned:
                return None
            sup = state.read_pid(self.dir / state.SUPERVISOR_PID)
            if sup is None:
                if self.started_at is not None and time.time() - self.started_at < STARTUP_TIMEOUT:
                    return None
                tail = (self.dir / state.SUPERVISOR_LOG).read_text(errors="replace").strip().splitlines()[-1:]
                st = _status(None, "supervisor failed to start" + (f": {tail[0]}" if tail else ""))
            elif procs.alive(*sup):
                return None
            else:
                if (st := state.read_json(self.dir / state.STATUS)) is not None:  # it may have just finished
                    return st
                child = state.read_pid(self.dir / state.CHILD_PID)
                if child is not None and procs.start_time(child[0]) in (None, child[1]):
                    procs.signal_group(child[0], signal.SIGKILL)
                st = _status(None, "supervisor died unexpectedly; replica processes killed")
            state.write_json(self.dir / state.STATUS, st)
            return st


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "supervise":
        print("usage: python -m fairpod.executors.ray_node supervise RUN_DIR", file=sys.stderr)
        return 2
    return supervise(Path(args[1]))


if __name__ == "__main__":
    sys.exit(main())
