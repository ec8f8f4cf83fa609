"""The Ray executor itself: the Executor protocol on top of the node table, attempts and the pump."""

from __future__ import annotations

import fcntl
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from fairpod.executors import state
from fairpod.executors.base import ExecutorError, JobLaunch, ReplicaExit
from fairpod.executors.hostgpus import ThisHostMig
from fairpod.executors.logs import output_end
from fairpod.executors.ray.agents import Agents, _Agent, gone_errors
from fairpod.executors.ray.attempts import STARTED, Attempts, _Attempt, _Rep
from fairpod.executors.ray.connection import _import_ray, connect
from fairpod.executors.ray.inplace import InPlace
from fairpod.executors.ray.nodes import NodeTable, RayNode
from fairpod.executors.ray.pump import Pump, _first_line
from fairpod.executors.ray_node import NodeAgent

log = logging.getLogger("fairpod.executors.ray")

NAMESPACE_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DEFAULT_NODE_DIR = "/tmp/fairpod-ray"  # on each node: replicas' run dirs (or $FAIRPOD_RAY_NODE_DIR)
T = TypeVar("T")


class RayExecutor(Agents, NodeTable, Attempts, Pump, InPlace, ThisHostMig):
    """Executor on a Ray cluster (see the module doc). Thread-safe; one per ``root`` and Ray namespace."""

    name = "ray"

    def __init__(
        self,
        root: str | Path,
        *,
        address: str | None = "auto",
        namespace: str = "fairpod",
        node_dir: str | None = None,
        poll_interval: float = 0.25,
        startup_timeout: float = 120.0,
        connect_timeout: float = 10.0,
        exclusive: bool = True,
    ) -> None:
        if not NAMESPACE_RE.fullmatch(namespace) or len(namespace) > 60:
            raise ExecutorError(f"invalid Ray namespace {namespace!r}: lower-case letters, digits and '-'")
        self.root = Path(root).absolute()
        self.namespace = namespace
        self.node_dir = node_dir or os.environ.get("FAIRPOD_RAY_NODE_DIR") or DEFAULT_NODE_DIR
        self.poll_interval = poll_interval
        self.startup_timeout = startup_timeout
        self.root.mkdir(parents=True, exist_ok=True)
        self._flock = open(self.root / ".lock", "a")  # noqa: SIM115 - held until close()
        try:
            if exclusive:  # without: the lease of fairpod up --ha keeps control planes apart (a stopped old
                fcntl.flock(self._flock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # leader may still hold this lock)
        except BlockingIOError:
            self._flock.close()
            raise ExecutorError(f"another executor is using {self.root}") from None
        try:
            self._owns_ray = not _import_ray().is_initialized()
            self.address = connect(address, namespace, connect_timeout)
        except BaseException:
            self._flock.close()
            raise
        import ray

        self._ray = ray
        self._lock = threading.RLock()
        self._attempts: dict[tuple[str, int], _Attempt] = {}
        self._exits: list[ReplicaExit] = []
        self._unacked: dict[tuple[str, int, int], ReplicaExit] = {}  # polled, not acknowledged yet
        self._notify: Callable[[], None] | None = None
        self._fence: Callable[[str], None] | None = None  # set_fence (fairpod up --ha)
        self._nodes: dict[str, RayNode] = {}  # by node id
        self._by_name: dict[str, RayNode] = {}
        self._agents: dict[str, _Agent] = {}  # by node id
        self._names: dict[str, str] = self._load_names()  # node id -> name
        self.nodes_version = 0
        self._closed = threading.Event()
        self._wake = threading.Event()
        self._pump_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="fairpod-ray-executor", daemon=True)
        try:
            self._agent_cls = ray.remote(NodeAgent)
            self._refresh_nodes()  # finds the agents already running (a restart), starts the missing ones
            self._wait_agents(min(30.0, self.startup_timeout))
            self._refresh_nodes()
            self._scan()
        except BaseException as e:
            self.close()
            if isinstance(e, ExecutorError | KeyboardInterrupt):
                raise
            raise ExecutorError(f"cannot use the Ray cluster at {self.address}: {_first_line(e)}") from e
        self._thread.start()

    # -- the Executor protocol -------------------------------------------------------------------------
    def launch(self, job: JobLaunch) -> None:
        job.validate(one_per_node=True)
        with self._lock:
            live = self.running()
            if job.job in live:
                raise ExecutorError(f"job {job.job} attempt {live[job.job]} is still running; stop it and wait "
                                    "for its exits first")
            old = self._attempts.get((job.job, job.attempt))
            if old is not None and not old.cleaned:
                self._cleanup(old, force=True)
            run = uuid.uuid4().hex[:8]
            adir = self.root / job.job / str(job.attempt)
            nodes = [self._by_name.get(r.node) for r in sorted(job.replicas, key=lambda r: r.rank)]
            att = _Attempt(job.job, job.attempt, time.monotonic())
            for rep, rn in zip(sorted(job.replicas, key=lambda r: r.rank), nodes, strict=True):
                rdir = adir / str(rep.rank)
                rdir.mkdir(parents=True, exist_ok=True)
                for name in (state.STATUS, state.REPORTED, STARTED):
                    (rdir / name).unlink(missing_ok=True)  # a relaunch of the same attempt: same log, fresh run
                (rdir / state.OUTPUT).touch()
                att.reps.append(_Rep(job.job, job.attempt, rep.rank, rep.node, rn.node_id if rn else "",
                                     f"{job.job}/{job.attempt}/{rep.rank}-{run}", rdir,
                                     log_base=output_end(rdir / state.OUTPUT), log_cap=job.log_max_bytes))
            self._attempts[(job.job, job.attempt)] = att
            missing = {r.node: rn for r, rn in zip(att.reps, nodes, strict=True)
                       if rn is None or not rn.alive or rn.node_id not in self._agents}
            if missing:
                first = next(iter(missing))
                where = "is not in the Ray cluster" if missing[first] is None else "is not usable"
                for started in att.reps:
                    rn = missing.get(started.node)
                    if started.node not in missing:
                        why = f"not started: node {first} of this job {where}"
                    elif rn is None:
                        why = f"node lost: node {started.node} is not in the Ray cluster"
                    else:
                        why = f"node lost: {started.node}: {rn.death or 'not alive'}"
                    self._finalize(started, {"returncode": None, "signal": None, "reason": why})
                att.cleaned = True
                return
            try:
                self._start(job, att, nodes)  # type: ignore[arg-type]
            except Exception as e:  # noqa: BLE001 - Ray errors: the replicas end with the reason
                log.exception("launch of %s attempt %s failed", job.job, job.attempt)
                for started in att.reps:
                    self._finalize(started, {"returncode": None, "signal": None,
                                             "reason": f"could not start on Ray: {e}"})
                self._cleanup(att, force=True)

    def stop(self, job: str, attempt: int, grace_seconds: float) -> None:
        with self._lock:
            att = self._attempts.get((job, attempt))
            if att is None:
                return
            now = time.monotonic()
            for rep in att.reps:
                if rep.final is not None:
                    continue
                grace = max(0.0, grace_seconds)
                rep.stop_grace = grace if rep.stop_at is None else min(rep.stop_grace, grace)
                rep.stop_at = rep.stop_at or now
                if rep.agent is not None and rep.start_ref is None:
                    rep.stop_ref = rep.agent.handle.stop.remote(rep.key, rep.stop_grace)
        self._wake.set()

    def poll(self, *, ack: bool = True) -> list[ReplicaExit]:
        with self._lock:
            for ex in self._exits:
                self._unacked[(ex.job, ex.attempt, ex.rank)] = ex
            self._exits = []
            out = list(self._unacked.values())
            if ack:
                self.ack(out)
        return sorted(out, key=lambda e: (e.ended_at, e.job, e.rank))

    def ack(self, exits: Sequence[ReplicaExit]) -> None:
        with self._lock:
            for ex in exits:
                if self._unacked.pop((ex.job, ex.attempt, ex.rank), None) is None:
                    continue
                rdir = self.root / ex.job / str(ex.attempt) / str(ex.rank)
                state.write_atomic(rdir / state.REPORTED, f"{time.time()}\n")
            for key, att in list(self._attempts.items()):
                if att.cleaned and all((r.dir / state.REPORTED).exists() for r in att.reps):
                    del self._attempts[key]

    def running(self) -> dict[str, int]:
        with self._lock:
            out: dict[str, int] = {}
            for att in self._attempts.values():
                if any(r.final is None for r in att.reps):
                    out[att.job] = max(out.get(att.job, att.attempt), att.attempt)
            return out

    def adopt(self, *, ack: bool = True) -> list[ReplicaExit]:
        self._scan()
        self._pump_once(wait=2.0)  # exits recorded by agents while nobody polled
        return self.poll(ack=ack)

    def log_path(self, job: str, replica: int = 0, attempt: int | None = None) -> Path | None:
        return state.log_path(self.root, job, replica, attempt)

    def follow(
        self, job: str, replica: int = 0, attempt: int | None = None, poll_interval: float = 0.25
    ) -> Iterator[str]:
        """Text of a replica's log as it arrives, until that replica has ended."""
        return state.follow(self.root, job, replica, attempt, poll_interval)

    def close(self) -> None:
        """Stop talking to Ray; the replicas keep running and the next executor on ``root`` adopts them."""
        self._closed.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
        if not self._flock.closed:
            self._flock.close()

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- more than the protocol ---------------------------------------------------------------------------
    def set_notify(self, fn: Callable[[], None] | None) -> None:
        """Call ``fn()`` (from the executor's thread) whenever an exit is ready for ``poll``."""
        self._notify = fn

    def run_on_node(self, node: str, fn: Callable[..., T], *args: Any, timeout: float) -> T:
        """Run ``fn(*args)`` (picklable) in the agent of fairpod node ``node``; its result or its exception.

        The agent holds the node's GPUs, so ``fn`` sees them all (a deep health check, say). Raises
        :class:`ExecutorError` if the node or its agent is not live or is lost during the call, and
        :class:`TimeoutError` if it takes longer than ``timeout`` seconds (the call is left to finish).
        """
        ray = self._ray
        rn = self._by_name.get(node)
        if rn is None or not rn.alive:
            self._refresh_nodes()
            rn = self._by_name.get(node)
        if rn is None:
            raise ExecutorError(f"node {node} is not in the Ray cluster")
        with self._lock:
            agent = self._agents.get(rn.node_id)
        if not rn.alive or agent is None or not agent.ready or agent.lost is not None:
            raise ExecutorError(f"node {node} is not alive in the Ray cluster ({rn.death or 'dead'})")
        ref = agent.handle.run.remote(fn, args)
        what = getattr(fn, "__name__", "the function")
        try:
            return ray.get(ref, timeout=timeout)  # type: ignore[no-any-return]
        except ray.exceptions.GetTimeoutError:
            try:
                ray.cancel(ref)
            except Exception:  # noqa: BLE001 - a running call of a threaded actor cannot be cancelled
                pass
            raise TimeoutError(f"{what} did not finish within {timeout:g} s on node {node}") from None
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        except (*gone_errors(ray), ray.exceptions.NodeDiedError) as e:
            raise ExecutorError(f"{what} could not run on node {node}: {str(e).splitlines()[0]}") from None
