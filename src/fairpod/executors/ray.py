"""The Ray executor: the replicas of fairpod's jobs run on the nodes of an existing Ray cluster.

fairpod's engine decides which job runs on which nodes; this executor only carries the decision out. Each
attempt of a job gets one detached placement group, one bundle per replica (its GPUs), ``STRICT_SPREAD``,
each bundle bound to the Ray node the engine chose (``bundle_label_selector`` on Ray's ``ray.io/node-id``
label). In each bundle runs a detached, named *replica agent* actor (:mod:`fairpod.executors.ray_node`) that
starts the replica's command under the local executor's supervisor, so replicas get the same environment and
the same stop and clean-up rules as with :class:`~fairpod.executors.local.LocalExecutor` (see
:mod:`fairpod.executors`); ``MASTER_ADDR`` is the rank-0 node's address, ``MASTER_PORT`` a free port there,
``CUDA_VISIBLE_DEVICES``/``FAIRPOD_ACCELERATORS`` the GPUs Ray gave the actor, ``FAIRPOD_RAY_NODE_ID`` the
Ray node.

Nodes. A Ray node is a fairpod node when it carries the custom resource ``fairpod/instance-type:<type>``
(``ray start --resources '{"fairpod/instance-type:ml.g5.12xlarge": 1}' --num-gpus 4``) or the label
``fairpod/instance-type=<type>``. Its fairpod name is its Ray node name (``ray start --node-name``, by
default its IP address); when another live node has that name already, ``<name>-<first 8 hex of the node
id>``. :meth:`RayExecutor.cluster_nodes` is the table :mod:`fairpod.server.membership` turns into joins,
faults and departures.

State. Everything needed to pick up after a restart of the control plane is under ``root``:
``<root>/<job>/<attempt>/ray.json`` (placement group, actors, nodes of the attempt) and, per replica,
``<root>/<job>/<attempt>/<rank>/`` with ``output.log`` (a copy of the replica's output, pulled from its agent
every ``poll_interval``: the control plane needs no file system shared with the nodes for logs),
``status.json`` and the ``reported`` marker, as the local executor keeps them; ``<root>/ray-nodes.json`` keeps
the names given to Ray nodes. A background thread talks to Ray; the protocol methods only read and write
memory and disk, and submit Ray calls without waiting for them.

Exits besides those of the command: ``"node lost: ..."`` when the replica's Ray node died, and ``"the
replica's Ray actor died: ..."`` when its actor did (killed, or its worker crashed): in both cases the exit is
reported at once, and the supervisor, which watches the actor's process, stops what is left of the replica
(SIGTERM, SIGKILL after the grace period) if the machine still runs; ``"not started: ..."`` when the placement
group could not be placed within ``startup_timeout``; ``"lost while the control plane was down: ..."`` when a
replica's actor had disappeared at start-up; ``"killed: ..."`` when a stopped replica has not ended
``STOP_MARGIN`` seconds after its grace period (its actor is killed).

Only one fairpod control plane may use a Ray namespace: at start-up, actors and placement groups of the
namespace that none of its records names are removed.
"""

from __future__ import annotations

import fcntl
import inspect
import ipaddress
import logging
import os
import re
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from fairpod.executors import state
from fairpod.executors.base import ExecutorError, JobLaunch, ReplicaExit
from fairpod.executors.ray_node import ReplicaAgent

log = logging.getLogger("fairpod.executors.ray")

ITYPE_RESOURCE = "fairpod/instance-type:"
ITYPE_LABEL = "fairpod/instance-type"
NODE_ID_LABEL = "ray.io/node-id"
RECORD = "ray.json"
NODES_FILE = "ray-nodes.json"
NAMESPACE_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
CHUNK = 1 << 20  # log bytes per pull
STOP_MARGIN = 15.0  # after grace + this, a replica that has not ended gets its actor killed
UNAVAILABLE_LIMIT = 30.0  # an agent unreachable this long (its node alive) counts as lost
DEFAULT_NODE_DIR = "/tmp/fairpod-ray"  # on each node: replicas' run dirs (or $FAIRPOD_RAY_NODE_DIR)
T = TypeVar("T")


# -- connecting ----------------------------------------------------------------------------------------


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> (host, port); ValueError with a message for the user."""
    host, sep, port = address.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"invalid Ray address {address!r}: give auto or HOST:PORT (the head's GCS port, e.g. 6379)")
    return host, int(port)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ExecutorError("the Ray executor needs Ray on this machine: pip install 'fairpod[ray]'") from None
    return ray


def resolve_address(address: str | None) -> str:
    """The ``HOST:PORT`` of the Ray cluster: ``address``, or for ``auto``/None ``$RAY_ADDRESS`` or the
    cluster that ``ray start`` recorded on this machine."""
    if address and address != "auto":
        parse_address(address)
        return address.strip()
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env and env != "auto":
        if env.startswith("ray://") or env.startswith("http"):
            raise ExecutorError(f"RAY_ADDRESS={env} is not a GCS address; fairpod needs HOST:PORT of the Ray head")
        return env
    _import_ray()
    from ray._private import services

    try:
        found = services.find_bootstrap_address(None)
    except Exception:  # noqa: BLE001 - any failure means: nothing recorded
        found = None
    if not found:
        raise ExecutorError("no Ray cluster found on this machine for --ray-address auto (RAY_ADDRESS is unset "
                            "and 'ray start' has recorded none); start one or give --ray-address HOST:PORT")
    return str(found)


def check_reachable(address: str | None, timeout: float = 5.0) -> str:
    """Raise :class:`ExecutorError` (one line) unless the Ray head at ``address`` accepts connections;
    returns the resolved ``HOST:PORT``."""
    try:
        resolved = resolve_address(address)
        host, port = parse_address(resolved)
    except ValueError as e:
        raise ExecutorError(str(e)) from None
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        why = e.strerror or str(e) or type(e).__name__
        raise ExecutorError(f"cannot reach the Ray cluster at {host}:{port}: {why} "
                            "(is 'ray start --head' running there, and is that its GCS port?)") from None
    return resolved


def connect(address: str | None, namespace: str = "fairpod", timeout: float = 10.0) -> str:
    """Connect this process to the Ray cluster at ``address`` (``auto``/None: see :func:`resolve_address`)
    as a driver; returns the ``HOST:PORT`` used. Raises :class:`ExecutorError` with one line for the user.

    A loopback address is kept on loopback when the cluster's nodes advertise a loopback address (a cluster
    started on one machine with ``--node-ip-address 127.0.0.1``): Ray would otherwise replace it with this
    machine's external address.
    """
    resolved = check_reachable(address, timeout=min(timeout, 5.0))
    ray = _import_ray()
    if "bundle_label_selector" not in inspect.signature(ray.util.placement_group).parameters:
        raise ExecutorError(f"Ray {ray.__version__} is too old for fairpod: placement groups need "
                            "bundle_label_selector (pip install -U 'fairpod[ray]')")
    host, port = parse_address(resolved)
    if ray.is_initialized():  # this process is a driver already: of this cluster, or it cannot use it
        current = str(ray.get_runtime_context().gcs_address or "")
        same = current.rsplit(":", 1)[-1] == str(port) and (
            current.rsplit(":", 1)[0] == host or (_is_loopback(host) and _is_loopback(current.rsplit(":", 1)[0])))
        if not same:
            raise ExecutorError(f"this process is connected to the Ray cluster at {current}, not {host}:{port}")
        return resolved
    if _is_loopback(host):
        _keep_loopback(ray, host, port, timeout)
    try:
        ray.init(address=f"{host}:{port}", namespace=namespace, log_to_driver=False,
                 logging_level=logging.WARNING, configure_logging=False)
    except Exception as e:  # noqa: BLE001 - Ray raises many kinds; the user gets one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ExecutorError(f"cannot connect to the Ray cluster at {host}:{port}: {first}") from None
    return resolved


def _keep_loopback(ray: Any, host: str, port: int, timeout: float) -> None:
    from ray._private import ray_constants
    from ray._raylet import GcsClient

    try:
        nodes = GcsClient(address=f"{host}:{port}").get_all_node_info(timeout=max(1, int(timeout)))
    except Exception as e:  # noqa: BLE001
        raise ExecutorError(f"cannot read the node table of the Ray cluster at {host}:{port}: {e}") from None
    if any(_is_loopback(info.node_manager_address) for info in nodes.values()) and hasattr(
        ray_constants, "ENABLE_RAY_CLUSTER"
    ):
        # the nodes live on this machine's loopback: resolve "this node's address" to loopback as well
        ray_constants.ENABLE_RAY_CLUSTER = False


# -- the node table --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RayNode:
    """A Ray node as fairpod sees it. ``instance_type`` None: not a fairpod node (e.g. a CPU-only head)."""

    name: str
    node_id: str
    address: str
    alive: bool
    instance_type: str | None
    gpus: float
    problem: str | None = None  # why it cannot be a fairpod node although it asks to be one
    death: str | None = None  # Ray's reason, for a dead node
    expected_death: bool = False  # stopped on purpose (ray stop, scaled down) rather than lost


def _instance_type(raw: dict[str, Any]) -> tuple[str | None, str | None]:
    types = {k[len(ITYPE_RESOURCE):] for k in (raw.get("Resources") or {}) if k.startswith(ITYPE_RESOURCE)}
    label = (raw.get("Labels") or {}).get(ITYPE_LABEL)
    if label:
        types.add(str(label))
    if not types:
        return None, None
    if len(types) > 1:
        return sorted(types)[0], f"it names several instance types ({', '.join(sorted(types))})"
    return types.pop(), None


def _sanitize(name: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "ray-node"
    return out[:200]


# -- executor state ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Rep:
    job: str
    attempt: int
    rank: int
    node: str
    node_id: str
    actor: str  # actor name in the namespace
    dir: Path  # control-plane side
    handle: Any = None
    start_ref: Any = None
    sync_ref: Any = None
    stop_ref: Any = None
    offset: int = 0  # bytes of the agent's log copied so far
    log_base: int = 0  # size of the copy when this run started (a relaunch appends to the same file)
    final: dict[str, Any] | None = None
    agent_final: bool = False  # the exit came from the agent (it still has its run dir to delete)
    stop_at: float | None = None  # monotonic
    stop_grace: float = 0.0
    unavailable_since: float | None = None


@dataclass(slots=True)
class _Attempt:
    job: str
    attempt: int
    pg_name: str
    pg: Any
    created: float  # monotonic
    reps: list[_Rep] = field(default_factory=list)
    cleanup_refs: list[Any] | None = None
    cleanup_at: float | None = None
    cleaned: bool = False


class RayExecutor:
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
            fcntl.flock(self._flock, fcntl.LOCK_EX | fcntl.LOCK_NB)
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
        self._notify: Callable[[], None] | None = None
        self._nodes: dict[str, RayNode] = {}  # by node id
        self._by_name: dict[str, RayNode] = {}
        self._names: dict[str, str] = self._load_names()  # node id -> name
        self.nodes_version = 0
        self._remote_fns: dict[Callable[..., Any], Any] = {}
        self._closed = threading.Event()
        self._wake = threading.Event()
        self._pump_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="fairpod-ray-executor", daemon=True)
        try:
            self._agent_cls = ray.remote(ReplicaAgent)
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
        self._validate(job)
        with self._lock:
            live = self.running()
            if job.job in live:
                raise ExecutorError(f"job {job.job} attempt {live[job.job]} is still running; stop it and wait "
                                    "for its exits first")
            old = self._attempts.get((job.job, job.attempt))
            if old is not None and not old.cleaned:
                self._cleanup(old, force=True)
            run = uuid.uuid4().hex[:8]
            pg_name = f"fairpod:{self.namespace}:{job.job}:{job.attempt}:{run}"
            adir = self.root / job.job / str(job.attempt)
            nodes = [self._by_name.get(r.node) for r in sorted(job.replicas, key=lambda r: r.rank)]
            att = _Attempt(job.job, job.attempt, pg_name, None, time.monotonic())
            for rep, rn in zip(sorted(job.replicas, key=lambda r: r.rank), nodes, strict=True):
                rdir = adir / str(rep.rank)
                rdir.mkdir(parents=True, exist_ok=True)
                for name in (state.STATUS, state.REPORTED):
                    (rdir / name).unlink(missing_ok=True)  # a relaunch of the same attempt: same log, fresh run
                (rdir / state.OUTPUT).touch()
                att.reps.append(_Rep(job.job, job.attempt, rep.rank, rep.node, rn.node_id if rn else "",
                                     f"{job.job}:{job.attempt}:{rep.rank}:{run}", rdir,
                                     log_base=(rdir / state.OUTPUT).stat().st_size))
            self._attempts[(job.job, job.attempt)] = att
            missing = [r.node for r, rn in zip(att.reps, nodes, strict=True) if rn is None or not rn.alive]
            if missing:
                for rep in att.reps:
                    why = (f"node lost: node {rep.node} is not in the Ray cluster" if rep.node in missing else
                           f"not started: node {missing[0]} of this job is not in the Ray cluster")
                    self._finalize(rep, {"returncode": None, "signal": None, "reason": why})
                att.cleaned = True
                return
            try:
                self._start(job, att, nodes, run)  # type: ignore[arg-type]
            except Exception as e:  # noqa: BLE001 - Ray errors: the replicas end with the reason
                log.exception("launch of %s attempt %s failed", job.job, job.attempt)
                for rep in att.reps:
                    self._finalize(rep, {"returncode": None, "signal": None, "reason": f"could not start on Ray: {e}"})
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
                if rep.handle is not None:
                    rep.stop_ref = rep.handle.stop.remote(rep.stop_grace)
        self._wake.set()

    def poll(self) -> list[ReplicaExit]:
        with self._lock:
            out, self._exits = self._exits, []
            for ex in out:
                rdir = self.root / ex.job / str(ex.attempt) / str(ex.rank)
                state.write_atomic(rdir / state.REPORTED, f"{time.time()}\n")
            for key, att in list(self._attempts.items()):
                if att.cleaned and all((r.dir / state.REPORTED).exists() for r in att.reps):
                    del self._attempts[key]
        return sorted(out, key=lambda e: (e.ended_at, e.job, e.rank))

    def running(self) -> dict[str, int]:
        with self._lock:
            out: dict[str, int] = {}
            for att in self._attempts.values():
                if any(r.final is None for r in att.reps):
                    out[att.job] = max(out.get(att.job, att.attempt), att.attempt)
            return out

    def adopt(self) -> list[ReplicaExit]:
        self._scan()
        self._pump_once(wait=2.0)  # exits recorded by agents while nobody polled
        return self.poll()

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

    def cluster_nodes(self) -> list[RayNode]:
        """Every named Ray node, live and dead, as of the last refresh (every ``poll_interval``)."""
        with self._lock:
            return list(self._by_name.values())

    def run_on_node(self, node: str, fn: Callable[..., T], *args: Any, timeout: float) -> T:
        """Run ``fn(*args)`` (picklable) as a Ray task on fairpod node ``node``; its result or its exception.

        Raises :class:`ExecutorError` if the node is not a live Ray node or is lost during the call, and
        :class:`TimeoutError` (after cancelling the task) if it takes longer than ``timeout`` seconds.
        """
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        rn = self._by_name.get(node)
        if rn is None or not rn.alive:
            self._refresh_nodes()
            rn = self._by_name.get(node)
        if rn is None:
            raise ExecutorError(f"node {node} is not in the Ray cluster")
        if not rn.alive:
            raise ExecutorError(f"node {node} is not alive in the Ray cluster ({rn.death or 'dead'})")
        with self._lock:
            remote = self._remote_fns.get(fn)
            if remote is None:
                remote = self._remote_fns[fn] = ray.remote(fn)
        ref = remote.options(
            num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(rn.node_id, soft=False)
        ).remote(*args)
        what = getattr(fn, "__name__", "the function")
        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref, force=True)
            raise TimeoutError(f"{what} did not finish within {timeout:g} s on node {node}") from None
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        except (ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError,
                ray.exceptions.TaskUnschedulableError) as e:
            raise ExecutorError(f"{what} could not run on node {node}: {str(e).splitlines()[0]}") from None

    # -- launching -----------------------------------------------------------------------------------------
    def _start(self, job: JobLaunch, att: _Attempt, nodes: list[RayNode], run: str) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        reps = sorted(job.replicas, key=lambda r: r.rank)
        gpus = [len(r.accelerators) for r in reps]
        bundles = [{"GPU": float(g)} if g else {"CPU": 0.001} for g in gpus]
        record = {
            "job": job.job, "team": job.team, "attempt": job.attempt, "namespace": self.namespace,
            "placement_group": att.pg_name, "launched_at": time.time(), "grace_seconds": job.grace_seconds,
            "replicas": [{"rank": r.rank, "node": r.node, "node_id": n.node_id, "actor": rep.actor,
                          "log_base": rep.log_base} for r, n, rep in zip(reps, nodes, att.reps, strict=True)],
        }  # fmt: skip
        state.write_json(self.root / job.job / str(job.attempt) / RECORD, record)  # before anything exists in Ray
        att.pg = placement_group(bundles, strategy="STRICT_SPREAD", name=att.pg_name, lifetime="detached",
                                 bundle_label_selector=[{NODE_ID_LABEL: n.node_id} for n in nodes])
        for rep, g in zip(att.reps, gpus, strict=True):
            node_rdir = f"{self.node_dir}/{self.namespace}/{job.job}/{job.attempt}/{rep.rank}-{run}"
            rep.handle = self._agent_cls.options(
                name=rep.actor, namespace=self.namespace, lifetime="detached", max_concurrency=4, max_restarts=0,
                num_cpus=0, num_gpus=g,
                scheduling_strategy=PlacementGroupSchedulingStrategy(att.pg, placement_group_bundle_index=rep.rank),
            ).remote(node_rdir)  # fmt: skip
        master_addr = nodes[0].address
        port_ref = att.reps[0].handle.free_port.remote(master_addr)
        workdir = os.getcwd()
        for rep, r in zip(att.reps, reps, strict=True):
            rep.start_ref = rep.handle.start.remote(job, r, master_addr, port_ref, workdir)

    # -- the background thread -----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self.poll_interval)
            self._wake.clear()
            if self._closed.is_set():
                return
            try:
                self._pump_once(wait=min(0.2, self.poll_interval))
            except Exception:  # keep going: Ray may be briefly unavailable
                log.exception("Ray executor: pump failed")

    def _pump_once(self, wait: float) -> None:
        with self._pump_lock:  # one pass at a time (the thread, and adopt)
            self._pump(wait)

    def _pump(self, wait: float) -> None:
        ray = self._ray
        self._refresh_nodes()
        now = time.monotonic()
        with self._lock:
            atts = list(self._attempts.values())
            for att in atts:
                for rep in att.reps:
                    if rep.final is None:
                        self._check_rep(att, rep, now)
            inflight = {}
            for att in atts:
                for rep in att.reps:
                    if rep.final is not None or rep.handle is None:
                        continue
                    if rep.start_ref is not None:
                        inflight[rep.start_ref] = (rep, "start")
                    else:
                        if rep.sync_ref is None:
                            rep.sync_ref = rep.handle.sync.remote(rep.offset, CHUNK)
                        inflight[rep.sync_ref] = (rep, "sync")
        if inflight:
            ready, _ = ray.wait(list(inflight), num_returns=len(inflight), timeout=wait)
            for ref in ready:
                rep, kind = inflight[ref]
                self._collect(rep, kind, ref)
        with self._lock:
            for att in list(self._attempts.values()):
                if not att.cleaned and all(r.final is not None for r in att.reps):
                    self._cleanup(att, force=False)

    def _check_rep(self, att: _Attempt, rep: _Rep, now: float) -> None:
        """Exits that need no answer from the agent: node lost, never placed, stop overdue."""
        rn = self._nodes.get(rep.node_id)
        if rn is None or not rn.alive:
            why = rn.death if rn is not None and rn.death else "it left the Ray cluster"
            self._finalize(rep, {"returncode": None, "signal": None, "reason": f"node lost: {rep.node}: {why}"})
            return
        placed = rep.start_ref is None or self._pg_created(att)
        if not placed and now - att.created > self.startup_timeout:
            self._finalize(rep, {"returncode": None, "signal": None, "reason": (
                f"not started: Ray could not place it on node {rep.node} within {self.startup_timeout:g} s "
                "(are that node's GPUs used by work fairpod does not manage?)")})
            return
        if rep.stop_at is not None:
            if not placed:
                self._finalize(rep, {"returncode": None, "signal": None, "reason": "stopped before start"})
            elif now > rep.stop_at + rep.stop_grace + STOP_MARGIN:
                if rep.handle is not None:
                    self._ray.kill(rep.handle, no_restart=True)
                self._finalize(rep, {"returncode": None, "signal": int(signal.SIGKILL), "reason": (
                    f"killed: it did not stop within {rep.stop_grace:g} s + {STOP_MARGIN:g} s; its Ray actor was "
                    "killed and its supervisor stops what is left")})
        if rep.unavailable_since is not None and now - rep.unavailable_since > UNAVAILABLE_LIMIT:
            self._finalize(rep, {"returncode": None, "signal": None, "reason": (
                f"node lost: the replica's agent on {rep.node} has been unreachable for {UNAVAILABLE_LIMIT:g} s")})

    def _pg_created(self, att: _Attempt) -> bool:
        if att.pg is None:
            return False
        from ray.util.placement_group import placement_group_table

        try:
            return placement_group_table(att.pg).get("state") == "CREATED"
        except Exception:  # noqa: BLE001
            return False

    def _collect(self, rep: _Rep, kind: str, ref: Any) -> None:
        ray = self._ray
        try:
            result = ray.get(ref, timeout=0)
        except ray.exceptions.GetTimeoutError:
            return
        except ray.exceptions.ActorUnavailableError:
            with self._lock:
                rep.unavailable_since = rep.unavailable_since or time.monotonic()
                if kind == "sync":
                    rep.sync_ref = None
            return
        except ray.exceptions.RayError as e:
            with self._lock:
                if kind == "sync":
                    rep.sync_ref = None
                if rep.final is not None:
                    return
                rn = self._nodes.get(rep.node_id)
                if rn is None or not rn.alive:
                    why = rn.death if rn is not None and rn.death else "it left the Ray cluster"
                    reason = f"node lost: {rep.node}: {why}"
                elif isinstance(e, ray.exceptions.ActorDiedError | ray.exceptions.RayActorError):
                    reason = f"the replica's Ray actor died: {_first_line(e)}; its supervisor stops the replica"
                else:
                    reason = f"could not start on Ray: {_first_line(e)}"
                self._finalize(rep, {"returncode": None, "signal": None, "reason": reason})
            return
        with self._lock:
            rep.unavailable_since = None
            if kind == "start":
                rep.start_ref = None
                if rep.stop_at is not None and rep.stop_ref is None and rep.handle is not None:
                    rep.stop_ref = rep.handle.stop.remote(rep.stop_grace)
                return
            rep.sync_ref = None
            if rep.final is not None:
                return
            data: bytes = result.get("data", b"")
            if data:
                with open(rep.dir / state.OUTPUT, "ab") as f:
                    f.write(data)
                rep.offset += len(data)
            st = result.get("status")
            if st is not None and rep.offset >= int(result.get("size", 0)):
                rep.agent_final = True
                self._finalize(rep, st)
            elif data:
                self._wake.set()  # more to pull

    def _finalize(self, rep: _Rep, st: dict[str, Any]) -> None:
        """Record a replica's exit (once): ``status.json`` on the control plane's disk, then queue it."""
        if rep.final is not None:
            return
        st = {**st, "ended_at": float(st.get("ended_at") or time.time())}
        rep.final = st
        state.write_json(rep.dir / state.STATUS, st)
        self._exits.append(ReplicaExit(job=rep.job, attempt=rep.attempt, rank=rep.rank,
                                       returncode=st.get("returncode"), signal=st.get("signal"),
                                       reason=str(st.get("reason", "")), ended_at=float(st["ended_at"])))
        fn = self._notify
        if fn is not None:
            fn()

    def _cleanup(self, att: _Attempt, force: bool) -> None:
        """Once every replica of an attempt has ended: agents that reported an exit delete their run dirs
        (waited for up to 10 s, unless ``force``), then actors and the placement group go (capacity back to
        Ray)."""
        ray = self._ray
        if att.cleanup_refs is None:
            att.cleanup_refs = [] if force else [r.handle.finish.remote() for r in att.reps
                                                 if r.handle is not None and r.agent_final]
            att.cleanup_at = time.monotonic()
        if att.cleanup_refs and not force:
            done, _ = ray.wait(att.cleanup_refs, num_returns=len(att.cleanup_refs), timeout=0)
            if len(done) < len(att.cleanup_refs) and time.monotonic() - (att.cleanup_at or 0) < 10:
                return
        for r in att.reps:
            if r.handle is not None:
                try:
                    ray.kill(r.handle, no_restart=True)
                except Exception:  # noqa: BLE001 - already dead
                    pass
        self._remove_pg(att.pg)
        att.cleaned = True

    def _remove_pg(self, pg: Any) -> None:
        if pg is None:
            return
        from ray.util.placement_group import remove_placement_group

        try:
            remove_placement_group(pg)
        except Exception:  # noqa: BLE001 - already removed
            pass

    # -- nodes -------------------------------------------------------------------------------------------
    def _refresh_nodes(self) -> None:
        raw = self._ray.nodes()
        with self._lock:
            table: dict[str, RayNode] = {}
            taken = {name: nid for nid, name in self._names.items()}
            alive_ids = {n["NodeID"] for n in raw if n.get("Alive")}
            changed = False
            for n in sorted(raw, key=lambda n: (not n.get("Alive"), n["NodeID"])):
                nid = n["NodeID"]
                itype, problem = _instance_type(n)
                if itype is None:
                    continue
                name = self._names.get(nid)
                if name is None:
                    if not n.get("Alive"):
                        continue  # died before we saw it
                    base = _sanitize(str(n.get("NodeName") or n.get("NodeManagerAddress") or nid))
                    owner = taken.get(base)
                    name = base if owner is None or owner not in alive_ids else f"{base}-{nid[:8]}"
                    if owner is not None and name == base:
                        self._names.pop(owner, None)  # a dead node's name passes to the new one
                    self._names[nid] = name
                    taken[name] = nid
                    changed = True
                death = None
                if not n.get("Alive"):
                    death = str(n.get("DeathReasonMessage") or "") or "dead"
                table[nid] = RayNode(
                    name=name, node_id=nid, address=str(n.get("NodeManagerAddress", "")), alive=bool(n.get("Alive")),
                    instance_type=itype, gpus=float((n.get("Resources") or {}).get("GPU", 0)), problem=problem,
                    death=death, expected_death=n.get("DeathReason") in (1, 4),
                )  # fmt: skip
            known = {n["NodeID"] for n in raw}
            for nid in [nid for nid in self._names if nid not in known]:
                del self._names[nid]  # Ray forgot the node: membership sees its name as gone
                changed = True
            by_name = {r.name: r for r in table.values()}
            if by_name != self._by_name or table != self._nodes:
                self.nodes_version += 1
            self._nodes, self._by_name = table, by_name
            if changed:
                self._save_names()

    def _load_names(self) -> dict[str, str]:
        data = state.read_json(self.root / NODES_FILE) or {}
        return {str(k): str(v) for k, v in data.items()}

    def _save_names(self) -> None:
        state.write_json(self.root / NODES_FILE, dict(self._names))

    # -- start-up ------------------------------------------------------------------------------------------
    def _scan(self) -> None:
        """Re-attach to the agents of unreported replicas; remove this namespace's actors and placement groups
        that no record names."""
        ray = self._ray
        from ray.util.placement_group import PlacementGroup, placement_group_table

        pgs = {v.get("name"): (k, v) for k, v in placement_group_table().items() if v.get("name")}
        keep_actors: set[str] = set()
        keep_pgs: set[str] = set()
        with self._lock:
            for att in self._attempts.values():
                keep_actors.update(r.actor for r in att.reps)
                keep_pgs.add(att.pg_name)
            for rec_path in sorted(self.root.glob(f"*/*/{RECORD}")):
                rec = state.read_json(rec_path)
                if rec is None or rec.get("namespace") != self.namespace:
                    continue
                job, attempt = str(rec.get("job")), int(rec.get("attempt", -1))
                if (job, attempt) in self._attempts:
                    continue
                adir = rec_path.parent
                reps = [_Rep(job, attempt, int(r["rank"]), str(r["node"]), str(r["node_id"]), str(r["actor"]),
                             adir / str(r["rank"]), log_base=int(r.get("log_base", 0)))
                        for r in rec.get("replicas", [])]
                if not reps or all((r.dir / state.REPORTED).exists() for r in reps):
                    continue
                pg_name = str(rec.get("placement_group", ""))
                pg = None
                if pg_name in pgs and pgs[pg_name][1].get("state") != "REMOVED":
                    pg = PlacementGroup(ray._raylet.PlacementGroupID(bytes.fromhex(pgs[pg_name][0])))
                att = _Attempt(job, attempt, pg_name, pg, time.monotonic(), reps)
                grace = float(rec.get("grace_seconds", 30.0))
                for rep in reps:
                    size = (rep.dir / state.OUTPUT).stat().st_size if (rep.dir / state.OUTPUT).exists() else 0
                    rep.offset = max(0, size - rep.log_base)
                    st = state.read_json(rep.dir / state.STATUS)
                    reported = (rep.dir / state.REPORTED).exists()
                    if st is not None:
                        rep.final = st
                        if not reported:
                            self._exits.append(ReplicaExit(job=job, attempt=attempt, rank=rep.rank,
                                                           returncode=st.get("returncode"), signal=st.get("signal"),
                                                           reason=str(st.get("reason", "")),
                                                           ended_at=float(st.get("ended_at", 0.0))))
                        continue
                    try:
                        rep.handle = ray.get_actor(rep.actor, namespace=self.namespace)
                        rep.stop_grace = grace
                    except ValueError:
                        self._finalize(rep, {"returncode": None, "signal": None, "reason": (
                            "lost while the control plane was down: its Ray actor is gone (node lost?)")})
                self._attempts[(job, attempt)] = att
                keep_actors.update(r.actor for r in reps)
                keep_pgs.add(pg_name)
        for info in ray.util.list_named_actors(all_namespaces=True):
            if info.get("namespace") == self.namespace and info.get("name") not in keep_actors:
                try:
                    ray.kill(ray.get_actor(info["name"], namespace=self.namespace), no_restart=True)
                    log.warning("removed Ray actor %s: no fairpod record names it", info["name"])
                except Exception:  # noqa: BLE001 - gone meanwhile
                    pass
        prefix = f"fairpod:{self.namespace}:"
        for name, (pid, info) in pgs.items():
            if str(name).startswith(prefix) and name not in keep_pgs and info.get("state") != "REMOVED":
                self._remove_pg(PlacementGroup(ray._raylet.PlacementGroupID(bytes.fromhex(pid))))
                log.warning("removed Ray placement group %s: no fairpod record names it", name)

    # -- helpers -------------------------------------------------------------------------------------------
    @staticmethod
    def _validate(job: JobLaunch) -> None:
        if not state.NAME_RE.fullmatch(job.job) or ".." in job.job or ":" in job.job:
            raise ExecutorError(f"invalid job name {job.job!r}")
        if job.attempt < 0:
            raise ExecutorError(f"invalid attempt {job.attempt}")
        if not job.command or not all(isinstance(a, str) for a in job.command):
            raise ExecutorError(f"job {job.job} has no command")
        ranks = sorted(r.rank for r in job.replicas)
        if not ranks or ranks != list(range(len(ranks))):
            raise ExecutorError(f"job {job.job}: replica ranks must be 0..n-1, got {ranks}")
        if len({r.node for r in job.replicas}) != len(job.replicas):
            raise ExecutorError(f"job {job.job}: the Ray executor runs one replica per node")
        if job.grace_seconds < 0:
            raise ExecutorError(f"job {job.job}: negative grace period")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
