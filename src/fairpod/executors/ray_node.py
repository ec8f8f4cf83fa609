"""The node side of the Ray executor: the fairpod node agent (one Ray actor per Ray node) and its supervisor.

This module imports no Ray at load time: :mod:`fairpod.executors.ray` turns :class:`NodeAgent` into a Ray
actor class, and ``python -m fairpod.executors.ray_node supervise DIR`` / ``... forkserver`` must start fast.

The control plane starts one detached, named agent per fairpod node (``fairpod-agent:<Ray node id>`` in its Ray
namespace, pinned to the node, holding the node's Ray GPUs). It lives as long as the node, across restarts of
the control plane, and runs every replica fairpod places on its node. Replica ``rank`` of attempt ``a`` of
job ``j`` has the *run key* ``<j>/<a>/<rank>-<run>`` and, on the node, the run directory
``<node_dir>/<namespace>/<key>/`` with the local executor's layout (:mod:`fairpod.executors.state`). The agent:

1. ``start``: builds the replica's environment with :func:`fairpod.executors.base.replica_env`
   (``CUDA_VISIBLE_DEVICES`` = the node's GPU ids at fairpod's accelerator slots), writes ``launch.json`` and
   has its fork server (``python -m fairpod.executors.ray_node forkserver``, started once, the local
   executor's :mod:`~fairpod.executors.forkserver`) fork a :class:`GuardedSupervisor` in a new session, outside
   the agent's process tree: Ray SIGKILLs an actor's direct children when the actor's process exits, which
   would leave the command's ``setsid`` descendants running. The supervisor is the local executor's, plus one
   rule: when the agent's process is gone (agent killed, node lost), it stops the replica as if a stop had
   been asked (SIGTERM to the whole tree, SIGKILL after the grace period);
2. ``sync``: for each of the node's replicas the control plane asks about, the new bytes of ``output.log``,
   whether its command's process has started (its supervisor wrote ``child.pid``: gang readiness), whether its
   last readiness probe passed (a service's readiness command, run by the supervisor in the replica's sandbox on
   the node: :mod:`fairpod.executors.readycheck`) and, once
   the replica has ended, its exit; it is also the agent's heartbeat (its PID and node id);
3. ``stop(key, grace)``: ``stop.json`` and SIGTERM to the supervisor (exactly as the local executor);
4. ``finish(keys)``: deletes run directories once the control plane has the whole log and the exit.

A restart in place of a replica is a ``start`` of a new run key for the same rank on the same agent, with the
attempt's rendezvous address (``fairpod.executors.ray.inplace``); the replica's other runs are not touched.

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
from typing import Any, Literal, overload

from fairpod import sandbox
from fairpod.executors import logs, procs, state
from fairpod.executors.base import JobLaunch, ReplicaLaunch, replica_env
from fairpod.executors.supervisor import Supervisor

STARTUP_TIMEOUT = 30.0  # a supervisor that has not written its PID file by then has failed
OWNER = "owner"  # launch.json: [pid, start_time] of the agent's process; the supervisor watches it
RAY_NODE_ID_ENV = "FAIRPOD_RAY_NODE_ID"
NODE_ADDRESS_ENV = "FAIRPOD_NODE_ADDRESS"
# variables Ray sets for its worker processes, not for the programs they start
_RAY_WORKER_ENV = ("RAY_JOB_ID", "RAY_RAYLET_PID", "RAY_CLIENT_MODE", "RAY_LD_PRELOAD_ON_WORKERS",
                   "PYTHONBREAKPOINT", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
# started in a new session by the agent: forks, and the child (not a child of the agent) runs the supervisor
_DETACH = ("import os, sys\n"
           "if os.fork():\n"
           "    os._exit(0)\n"
           "os.execv(sys.executable, [sys.executable, '-m', 'fairpod.executors.ray_node', 'supervise', sys.argv[1]])\n")


class GuardedSupervisor(Supervisor):
    """The local executor's supervisor that also stops the replica once its node agent's process has gone."""

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
                self.note("the node's fairpod agent is gone (agent killed or node lost)")
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


class _Run:
    """One replica on this node, as its agent knows it."""

    def __init__(self, rdir: Path) -> None:
        self.dir = rdir
        self.lock = threading.Lock()
        self.stop_grace: float | None = None
        self.started_at: float | None = None
        self.started_mono: float | None = None  # time.monotonic() at its start by this agent (None: adopted)
        self.spawned = False


class NodeAgent:
    """The fairpod node agent of one Ray node (made a Ray actor by :mod:`fairpod.executors.ray`; see the module
    doc). Runs with ``max_concurrency > 1``: ``stop`` and ``sync`` never wait behind another call. ``start`` and
    ``stop`` of a replica may arrive in either order; a stop that comes first makes ``start`` record
    ``"stopped before start"`` instead of starting anything.
    """

    def __init__(self, root: str) -> None:
        import ray

        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.node_id = ray.get_runtime_context().get_node_id()
        self.gpu_ids = [str(g) for g in ray.get_gpu_ids()]  # the node's GPUs: the agent holds all of them
        self.lock = threading.Lock()
        self.runs: dict[str, _Run] = {}
        self.forkserver: Any = None
        self.spawn_lock = threading.Lock()  # one fork server, one request and its answer at a time
        self._remove_leftovers()

    # -- calls from the control plane ------------------------------------------------------------
    def run(self, fn: Any, args: tuple[Any, ...]) -> Any:
        """``fn(*args)`` in this process (on this node, with all of its GPUs): e.g. a deep health check."""
        return fn(*args)

    def free_port(self, host: str) -> int:
        """A free TCP port on this node (the job's MASTER_PORT, when this is its rank-0 replica)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, 0))
            except OSError:
                s.bind(("", 0))
            return int(s.getsockname()[1])

    def start(self, key: str, job: JobLaunch, rep: ReplicaLaunch, master_addr: str, master_port: int,
              default_workdir: str | None, node_address: str = "") -> None:
        """Start the replica's supervisor (returns at once); the exit comes through ``sync``."""
        run = self._run(key)
        with run.lock:
            run.dir.mkdir(parents=True, exist_ok=True)
            run.started_at, run.started_mono = time.time(), time.monotonic()
            if run.spawned or (run.dir / state.STATUS).exists():
                return
            if run.stop_grace is not None:
                state.write_json(run.dir / state.STATUS, _status(None, "stopped before start"))
                return
            if any(not 0 <= a < len(self.gpu_ids) for a in rep.accelerators):
                why = f"accelerator slots {list(rep.accelerators)} but the node has {len(self.gpu_ids)} GPUs in Ray"
                state.write_json(run.dir / state.STATUS, _status(126, why))
                return
            try:
                Path(job.checkpoint_dir).mkdir(parents=True, exist_ok=True)
            except OSError as e:
                why = f"cannot create checkpoint dir {job.checkpoint_dir}: {e.strerror or e}"
                state.write_json(run.dir / state.STATUS, _status(126, why))
                return
            gpus = [self.gpu_ids[a] for a in rep.accelerators]  # fairpod's slots -> this node's GPU ids
            accel = tuple(int(g) for g in gpus) if all(g.isdigit() for g in gpus) else ()
            env = replica_env(job, replace(rep, accelerators=accel, real_gpus=True), master_addr, master_port)
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)  # Ray's ids, also when they are not numbers
            env["FAIRPOD_ACCELERATORS"] = ",".join(gpus)
            env[RAY_NODE_ID_ENV] = self.node_id
            env[NODE_ADDRESS_ENV] = node_address  # this node's own address (to bind gloo/NCCL sockets to)
            workdir = job.workdir
            if workdir is None:
                workdir = default_workdir if default_workdir and os.path.isdir(default_workdir) else str(Path.home())
            me = os.getpid()
            spec = {
                "job": job.job, "team": job.team, "attempt": job.attempt, "rank": rep.rank,
                "world_size": job.world_size, "node": rep.node, "command": list(job.command), "workdir": workdir,
                "grace_seconds": job.grace_seconds, "run_as": job.run_as, "umask": job.umask, "env": env, "master_port": master_port,
                "limits": sandbox.limits_of(rep.mcpu, rep.mib, accel), "container": job.container,
                "readiness": job.readiness, "log_max_bytes": job.log_max_bytes,
                "mounts_allow": list(job.mounts_allow), "named_workdir": job.workdir is not None,
                "launched_at": run.started_at, OWNER: [me, procs.start_time(me)],
            }  # fmt: skip
            state.write_launch(run.dir, spec)
            self._spawn(run.dir)
            run.spawned = True

    def stop(self, key: str, grace: float) -> None:
        """SIGTERM to the replica now, SIGKILL after ``grace`` seconds (a second stop may shorten it)."""
        run = self._run(key)
        with run.lock:
            run.stop_grace = max(0.0, grace) if run.stop_grace is None else min(run.stop_grace, max(0.0, grace))
            if not run.spawned or (run.dir / state.STATUS).exists():
                return
            state.write_json(run.dir / state.STOP, {"grace_seconds": run.stop_grace, "requested_at": time.time()})
            sup = state.read_pid(run.dir / state.SUPERVISOR_PID)
            if sup is not None and procs.alive(*sup):
                procs.signal_all([sup[0]], signal.SIGTERM)

    def kill(self, key: str) -> None:
        """SIGKILL to the replica's supervisor and its command's process group (a stop that is overdue)."""
        run = self._run(key)
        for name in (state.CHILD_PID, state.SUPERVISOR_PID):
            rec = state.read_pid(run.dir / name)
            if rec is not None and procs.alive(*rec):
                if name == state.CHILD_PID:
                    procs.signal_group(rec[0], signal.SIGKILL)
                procs.signal_all([rec[0]], signal.SIGKILL)

    def sync(self, asks: list[tuple[str, int, int]]) -> dict[str, Any]:
        """For each ``(key, offset, limit)``: log bytes from ``offset`` (at most ``limit``), the log's size,
        whether the command's process was started and the exit once there is one (``None`` for a key this agent
        has never heard of); and who answers."""
        out: dict[str, Any] = {}
        for key, offset, limit in asks:
            run = self._run(key, create=False)
            if run is None:
                out[key] = None
                continue
            st = self._check(run)  # before reading the log: the supervisor writes status.json after its last output
            # offsets in the output, not the file: a log over its cap is written again (fairpod.executors.logs)
            data, nxt = logs.read_output(run.dir / state.OUTPUT, offset, limit)
            size = logs.output_end(run.dir / state.OUTPUT)
            started = st is not None or (run.dir / state.CHILD_PID).exists()
            ready = (state.read_json(run.dir / state.READY) or {}).get("ready") is True  # its sandboxed probe's
            out[key] = {"data": data, "size": size, "next": nxt, "status": st, "started": started, "ready": ready}
        return {"pid": os.getpid(), "node_id": self.node_id, "replicas": out}

    def finish(self, keys: list[str]) -> None:
        """The control plane has everything of these replicas: remove their run directories."""
        for key in keys:
            run = self._run(key, create=False)
            if run is not None:
                with run.lock:
                    shutil.rmtree(run.dir, ignore_errors=True)
            with self.lock:
                self.runs.pop(key, None)

    # -- helpers -----------------------------------------------------------------------------------
    def _remove_leftovers(self) -> None:
        """Run directories of an agent that is gone (its replicas ended when it did): removed once their
        supervisor has finished."""
        for launch in self.root.glob(f"*/*/*/{state.LAUNCH}"):
            rdir = launch.parent
            owner = (state.read_launch(rdir, secret=False) or {}).get(OWNER)
            gone = not (isinstance(owner, list) and len(owner) == 2 and procs.alive(int(owner[0]), owner[1]))
            if gone and (rdir / state.STATUS).exists():
                shutil.rmtree(rdir, ignore_errors=True)

    @overload
    def _run(self, key: str, create: Literal[True] = ...) -> _Run: ...

    @overload
    def _run(self, key: str, create: bool) -> _Run | None: ...

    def _run(self, key: str, create: bool = True) -> _Run | None:
        """The run of ``key``, made when ``create``; without, None when this agent never launched it."""
        parts = key.split("/")
        if len(parts) != 3 or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"invalid run key {key!r}")
        with self.lock:
            run = self.runs.get(key)
            if run is None:
                rdir = self.root / key
                if not create and not (rdir / state.LAUNCH).exists():
                    return None
                run = self.runs[key] = _Run(rdir)
                if (rdir / state.LAUNCH).exists():  # started before (by this agent): pick it up
                    run.spawned = True
                    run.started_at = (rdir / state.LAUNCH).stat().st_mtime
            return run

    def _spawn(self, rdir: Path) -> None:
        from fairpod.executors.forkclient import ForkServerClient

        with self.spawn_lock:  # start() runs in many threads: each must read its own answer of the fork server
            if self.forkserver is None:
                self.forkserver = ForkServerClient(sys.executable, self.root, ("-m", __name__, "forkserver"),
                                                   env=base_env())
            if self.forkserver.spawn(rdir, rdir / state.SUPERVISOR_LOG) is not None:
                return
        with open(rdir / state.SUPERVISOR_LOG, "ab") as slog:  # no fork server: a new interpreter
            subprocess.run([sys.executable, "-c", _DETACH, str(rdir)], cwd=rdir, env=base_env(),
                           stdin=subprocess.DEVNULL, stdout=slog, stderr=subprocess.STDOUT,
                           start_new_session=True, timeout=60, check=False)

    def _check(self, run: _Run) -> dict[str, Any] | None:
        """The replica's exit, or None while it runs (or its supervisor is still starting)."""
        with run.lock:
            if (st := state.read_json(run.dir / state.STATUS)) is not None:
                return st
            if not run.spawned:
                return None
            sup = state.read_pid(run.dir / state.SUPERVISOR_PID)
            if sup is None:
                age = (time.monotonic() - run.started_mono if run.started_mono is not None  # a wall step moves
                       else time.time() - run.started_at if run.started_at is not None else None)  # not this
                if age is not None and age < STARTUP_TIMEOUT:
                    return None
                log = run.dir / state.SUPERVISOR_LOG
                tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
                st = _status(None, "supervisor failed to start" + (f": {tail[0]}" if tail else ""))
            elif procs.alive(*sup):
                return None
            else:
                if (st := state.read_json(run.dir / state.STATUS)) is not None:  # it may have just finished
                    return st
                child = state.read_pid(run.dir / state.CHILD_PID)
                if child is not None and procs.start_time(child[0]) in (None, child[1]):
                    procs.signal_group(child[0], signal.SIGKILL)
                st = _status(None, "supervisor died unexpectedly; replica processes killed")
            state.write_json(run.dir / state.STATUS, st)
            return st

def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["forkserver"]:
        from fairpod.executors import forkserver

        return forkserver.main(target=lambda a: supervise(Path(a[0])))
    if len(args) != 2 or args[0] != "supervise":
        print("usage: python -m fairpod.executors.ray_node supervise RUN_DIR | forkserver", file=sys.stderr)
        return 2
    return supervise(Path(args[1]))


if __name__ == "__main__":
    sys.exit(main())
