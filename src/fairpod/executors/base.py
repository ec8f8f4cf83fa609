"""What the control plane gives an executor and gets back from it (see :mod:`fairpod.executors`)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

T = TypeVar("T")
JOB_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")  # a job name safe as a directory name


class ExecutorError(RuntimeError):
    """A launch or stop the executor refuses or cannot do; the message is meant for the user."""


@dataclass(frozen=True, kw_only=True)
class ReplicaLaunch:
    """One replica: its rank, the node it runs on and the accelerators it gets there."""

    rank: int
    node: str
    accelerators: tuple[int, ...] = ()
    real_gpus: bool = False  # True: accelerators are CUDA device indices; False: slots of a virtual node
    devices: tuple[str, ...] = ()  # real GPUs: the CUDA devices when not the indices (MIG device UUIDs)
    mcpu: int = 0  # vCPU (millicores) the replica is held to on its node (0: not limited)
    mib: int = 0  # memory (MiB) the replica is held to on its node (0: not limited)


@dataclass(frozen=True, kw_only=True)
class JobLaunch:
    """One attempt of a job: ``attempt`` is the restart count (0 for the first run)."""

    job: str
    team: str
    attempt: int
    command: list[str]
    checkpoint_dir: str  # stable across attempts; the executor creates it
    replicas: tuple[ReplicaLaunch, ...]
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None  # None: the control plane's working directory
    grace_seconds: float = 30.0  # SIGTERM to SIGKILL on stop
    run_as: str | None = None  # OS user the replicas run as (None: fairpod's own; see sandbox.environment)
    umask: int | None = None  # the files the replicas make: the submitter's umask when they run as the submitter
    world: int = 0  # replicas of the attempt in all, when ``replicas`` are only some of them (an elastic job grows)
    # a job in a container image: {"image", "pull", "mounts", "workdir"} (fairpod.sandbox.container); None: host
    container: dict[str, Any] | None = None
    # a service's readiness command: each replica's supervisor runs it in the replica's sandbox (as its user, in
    # its cgroup and namespaces; fairpod.executors.readycheck), never the control plane; None: no such probe
    readiness: list[str] | None = None
    # the host directories the job's mounts and workdir may lie in (cluster.mounts.allow; fairpod.sandbox.hostpaths)
    mounts_allow: tuple[str, ...] = ("/",)
    spare: bool = False  # peer recovery: a spare of each replica started ahead (fairpod.executors.standby)
    log_max_bytes: int = 1 << 30  # the most each replica's log holds (policy.log_max_bytes; executors.logs.CappedLog)

    @property
    def world_size(self) -> int:
        return self.world or len(self.replicas)

    def validate(self, *, one_per_node: bool = False, workdir_here: bool = False) -> None:
        """ExecutorError (one line for the user) if this launch cannot be run: a job name unsafe as a directory
        name (no ':' either), a negative attempt, no command, ranks not 0..n-1, two
        replicas on one node (``one_per_node``), a negative grace, a workdir missing on this machine
        (``workdir_here``)."""
        if not JOB_NAME_RE.fullmatch(self.job) or ".." in self.job:
            raise ExecutorError(f"invalid job name {self.job!r}")
        if self.attempt < 0:
            raise ExecutorError(f"invalid attempt {self.attempt}")
        if (not self.command and not self.container) or not all(isinstance(a, str) for a in self.command):
            raise ExecutorError(f"job {self.job} has no command")
        ranks = sorted(r.rank for r in self.replicas)
        if not ranks or ranks != list(range(len(ranks))):
            raise ExecutorError(f"job {self.job}: replica ranks must be 0..n-1, got {ranks}")
        if one_per_node and len({r.node for r in self.replicas}) != len(self.replicas):
            raise ExecutorError(f"job {self.job}: the Ray executor runs one replica per node")
        if self.grace_seconds < 0:
            raise ExecutorError(f"job {self.job}: negative grace period")
        if workdir_here and self.workdir is not None and not os.path.isdir(self.workdir):
            raise ExecutorError(f"job {self.job}: workdir {self.workdir} does not exist")


@dataclass(frozen=True, kw_only=True)
class ReplicaExit:
    """How a replica ended: ``returncode`` if it exited, ``signal`` if a signal killed it (else None)."""

    job: str
    attempt: int
    rank: int
    returncode: int | None
    signal: int | None
    reason: str  # "exited 0", "exited 3", "killed by SIGKILL", "command not found: x", ...
    ended_at: float  # Unix time
    cpu_seconds: float | None = None  # what the replica used, read from its cgroup (None: not measured)
    memory_peak_bytes: int | None = None
    # False: its command never started (its launch never reached its node: the control plane that sent it
    # stopped first); the job goes back to its queue instead of failing (docs/ha.md)
    started: bool = True

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def replica_env(job: JobLaunch, replica: ReplicaLaunch, master_addr: str, master_port: int) -> dict[str, str]:
    """The environment a replica gets on top of its executor's: the user's ``env``, then the fairpod variables."""
    accel = ",".join(str(a) for a in replica.accelerators)
    env = {"PYTHONUNBUFFERED": "1", **job.env}
    env.update(
        FAIRPOD_JOB=job.job,
        FAIRPOD_TEAM=job.team,
        FAIRPOD_NODE=replica.node,
        FAIRPOD_ACCELERATORS=accel,
        FAIRPOD_CHECKPOINT_DIR=job.checkpoint_dir,
        FAIRPOD_RESTART_COUNT=str(job.attempt),
        RANK=str(replica.rank),
        NODE_RANK=str(replica.rank),
        WORLD_SIZE=str(job.world_size),
        NNODES=str(job.world_size),
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
    )
    ports = job.env.get("FAIRPOD_SERVICE_PORTS", "").split(",")  # a service's replicas: each its own port
    if replica.rank < len(ports) and ports[replica.rank]:
        env["PORT"] = ports[replica.rank]
    if replica.real_gpus:  # exactly the GPUs the engine placed the replica on, also for container runtimes
        visible = ",".join(replica.devices) if replica.devices else accel
        env["CUDA_VISIBLE_DEVICES"] = visible
        env["NVIDIA_VISIBLE_DEVICES"] = visible
    return env


@runtime_checkable
class Executor(Protocol):
    """Runs the replicas of jobs. Methods return quickly; none of them waits for a replica to end.

    Exits are handed over in two steps so that none is lost when the control plane dies between taking an exit
    and storing what it means: ``poll(ack=False)`` returns every exit not yet acknowledged (the same exits again
    on the next call, also from a new executor after a restart) and ``ack(exits)``, called once the control
    plane's store has committed them, marks them as reported for good. ``poll()`` (``ack=True``) does both.

    What some executors can do beyond this is declared by the capability protocols below (:class:`Notifying`,
    :class:`Following`, :class:`NodeTable`, :class:`NodeRunner`, :class:`StoppingReplicas`, :class:`Resizing`,
    :class:`HostGpus`, :class:`Discarding`, :class:`Starting`, :class:`RestartingInPlace`, :class:`Relocating`, :class:`Probing`);
    :func:`capability` finds one.
    """

    name: str

    def launch(self, job: JobLaunch) -> None:
        """Start every replica of ``job``; raises :class:`ExecutorError` with a clear message."""
        ...

    def stop(self, job: str, attempt: int, grace_seconds: float) -> None:
        """Begin a graceful stop (SIGTERM, SIGKILL after the grace); no-op if nothing of it runs."""
        ...

    def poll(self, *, ack: bool = True) -> list[ReplicaExit]:
        """Exits not acknowledged; with ``ack`` (the default) they are acknowledged at once (see the class doc)."""
        ...

    def ack(self, exits: Sequence[ReplicaExit]) -> None:
        """Mark ``exits`` (from ``poll``/``adopt``) reported for good: no later ``poll``/``adopt`` returns them."""
        ...

    def running(self) -> dict[str, int]:
        """job -> attempt, for every job with a live replica."""
        ...

    def adopt(self, *, ack: bool = True) -> list[ReplicaExit]:
        """On start-up: re-attach to live replicas and return the exits not acknowledged (recorded while nobody
        polled, or taken by a control plane that died before it stored them)."""
        ...

    def log_path(self, job: str, replica: int = 0, attempt: int | None = None) -> Path | None:
        """The output log of a replica (of the latest attempt by default), None if there is none."""
        ...

    def close(self) -> None:
        """Let go of the executor; the replicas keep running and a later executor adopts them."""
        ...


# -- optional capabilities ------------------------------------------------------------------------------


@runtime_checkable
class Notifying(Protocol):
    """Wakes the control plane as soon as an exit is ready for ``poll``."""

    def set_notify(self, fn: Callable[[], None] | None) -> None: ...


@runtime_checkable
class Following(Protocol):
    """Streams a replica's log as it is written, until the replica ends."""

    def follow(self, job: str, replica: int = 0, attempt: int | None = None,
               poll_interval: float = 0.25) -> Iterator[str]: ...


@runtime_checkable
class NodeTable(Protocol):
    """Has its own table of nodes (a Ray cluster): the control plane follows it (``fairpod.server.core.transitions.membership``);
    ``nodes_version`` changes whenever the table does. Each row of ``cluster_nodes()`` has ``name``, ``node_id``,
    ``alive``, ``instance_type`` (None: not a fairpod node), ``gpus``, ``problem``, ``death``, ``expected_death``,
    ``labels`` (its own, e.g. topology), ``group`` (the instance group it is stored under) and ``store_labels``
    (stored with it; ``node_label`` is among them, so a stored node of the table is known as one)."""

    nodes_version: int
    node_label: str

    def cluster_nodes(self) -> list[Any]: ...


@runtime_checkable
class NodeRunner(Protocol):
    """Runs a function on one of its nodes (health checks on the node itself)."""

    def run_on_node(self, node: str, fn: Callable[..., T], *args: Any, timeout: float) -> T: ...


@runtime_checkable
class StoppingReplicas(Protocol):
    """Stops some replicas of a live attempt, the others left running (a replica leaving a node that failed under
    it: ``server/core/transitions/relocation.py``)."""

    def stop_replicas(self, job: str, attempt: int, ranks: Sequence[int], grace_seconds: float) -> None:
        """Begin a graceful stop of those ranks only (SIGTERM, SIGKILL after the grace); the others keep running."""
        ...

    def replica_ranks(self, job: str, attempt: int) -> set[int]:
        """The ranks of the attempt that were started and are known here (alive, or ended with an exit not yet
        acknowledged): after a crash, which ranks of a growth or a restart still need starting."""
        ...


@runtime_checkable
class Resizing(StoppingReplicas, Protocol):
    """Grows and shrinks a live attempt (elastic jobs): starts more replicas of it, stops some of its replicas."""

    def add_replicas(self, job: JobLaunch) -> None:
        """Start ``job.replicas`` (new ranks) beside the live replicas of attempt ``job.attempt``, with the same
        rendezvous address (MASTER_ADDR/MASTER_PORT); raises :class:`ExecutorError`."""
        ...


@runtime_checkable
class Starting(Protocol):
    """Says which replicas of an attempt have started their process (gang readiness, ``server/core/transitions/readiness.py``)."""

    def started_ranks(self, job: str, attempt: int) -> set[int]:
        """The ranks of the attempt whose process was started (alive or ended since)."""
        ...


@runtime_checkable
class Probing(Protocol):
    """Runs a launch's ``readiness`` command inside each replica's sandbox, on its node, and says what it found
    (services, ``server/core/transitions/services.py``): the control plane runs nothing of the job's."""

    def probed_ready(self, job: str, attempt: int) -> set[int]:
        """The ranks of the attempt whose last readiness probe passed."""
        ...


@runtime_checkable
class RestartingInPlace(Protocol):
    """Starts a failed replica of a live attempt again on its node, the attempt's other replicas left running
    (``server/core/transitions/restarts.py``)."""

    def restart_replicas(self, job: JobLaunch) -> None:
        """Start ``job.replicas`` (ranks of attempt ``job.attempt`` whose replica ended and whose exit was
        acknowledged) again, with the attempt's rendezvous address; raises :class:`ExecutorError`."""
        ...


@runtime_checkable
class Relocating(Protocol):
    """Its :class:`RestartingInPlace` may start a replica on another node than the one it ran on (that node was lost
    or is out of service; ``server/core/transitions/relocation.py``), with the attempt's rendezvous address: the
    ``ReplicaLaunch.node`` of ``restart_replicas`` is then the new node."""

    def cannot_relocate(self, rank: int) -> str | None:
        """Why replica ``rank`` of an attempt cannot start on another node (the job then restarts whole, its event
        saying so), or None: ``restart_replicas`` starts it on the node its launch names."""
        ...


@runtime_checkable
class HostGpus(Protocol):
    """Reads the real GPUs its replicas run on: the MIG devices of partition slots, and GPU utilization (the
    watchdog's hang detection). An executor without it gets no MIG device UUIDs and no utilization."""

    def mig_devices(self, node: str, slots: Sequence[int], per_gpu: int, profile: str) -> tuple[str, ...]:
        """The MIG device UUIDs of ``node``'s partition slots (slot k: GPU k // ``per_gpu``, its MIG device
        k % ``per_gpu``); raises :class:`ExecutorError` when a GPU lacks them."""
        ...

    def gpu_utilization(self, gpus: Sequence[int]) -> list[float] | None:
        """Utilization (%) of those GPUs (indices), None when it cannot be read."""
        ...


@runtime_checkable
class Discarding(Protocol):
    """Deletes the run files (logs, status) of a finished job that retention deleted."""

    def discard(self, job: str) -> None: ...


def capability(executor: object, kind: Callable[..., T]) -> T | None:
    """``executor`` as the capability ``kind`` (one of the protocols above), or None if it lacks it. ``kind`` is
    typed as what makes a ``T``, not ``type[T]``: mypy refuses a protocol class where ``type[T]`` is asked."""
    return cast(T, executor) if isinstance(executor, cast(type, kind)) else None


@dataclass(frozen=True)
class Traits:
    """What an executor can do that a submit is checked against, as a value another process can be told: an API
    worker (``fairpod up --api-workers``) checks a job against the executor the core process runs without one."""

    name: str
    resizing: bool  # Resizing: elastic jobs, services
    probing: bool  # Probing: a service's readiness command

    @staticmethod
    def of(executor: Executor | Traits) -> Traits:
        if isinstance(executor, Traits):
            return executor
        return Traits(executor.name, capability(executor, Resizing) is not None,
                      capability(executor, Probing) is not None)
