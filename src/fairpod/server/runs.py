"""What the control plane remembers about a job's current attempt while its processes live.

It is kept in memory and written to the job's ``run_state`` in the store at every change, so a restarted
control plane knows which replicas of which attempt it started, on which accelerator slots, and why they
are being stopped. Also the one home of the job key (the executor's name for a job) and of the failure kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter, not_
from typing import Any

from fairpod.model.keys import run_key
from fairpod.store.records import Job

STOP_PREEMPT = "preempt"  # back to Pending when every replica has stopped
STOP_CANCEL = "cancel"  # Cancelled
STOP_RESTART = "restart"  # auto-resume: Pending again with attempt + 1
STOP_FAIL = "fail"  # Failed
STOP_DONE = "done"  # an elastic job whose training finished (a replica exited 0): Succeeded once all stopped
STOP_NOT_READY = "not_ready"  # gang readiness timed out: Pending again after a backoff (fairpod.server.core.transitions.readiness)


def job_key(job: Job) -> str:
    """The executor's name for a job (``fairpod.model.keys.run_key``): the one encoding of a job at the executor
    boundary (``fairpod.model.keys.job_id_of`` reads it back)."""
    return run_key(job.name, job.id)


def to_engine(job_id: int) -> str:
    """The engine's id of a job (``governance.Workload.id``: a string, as the simulator's trace names are). With
    :func:`from_engine`, the one place where the server's integer job id crosses into the engine and back."""
    return str(job_id)


def from_engine(wid: str) -> int:
    """The job id of an engine workload or decision (``Workload.id``, ``Admit.job``, ...) made by :func:`to_engine`."""
    return int(wid)


def having(runs: dict[int, Run], name: str) -> list[tuple[int, Run]]:
    """The (job id, run) pairs of ``runs`` whose field ``name`` is truthy, in the dict's order. The filter runs in
    C (``map``/``compress``): the turn's keepers look for the few attempts they act on among every live one
    (~30,000 at 10,000 nodes), and a Python loop over them cost 30-60 ms per keeper per turn
    (``benchmarks/turn_cost.py``); this costs about a millisecond."""
    return list(compress(runs.items(), map(attrgetter(name), runs.values())))


def lacking(runs: dict[int, Run], name: str) -> list[tuple[int, Run]]:
    """The (job id, run) pairs of ``runs`` whose field ``name`` is falsy, in the dict's order (as :func:`having`)."""
    return list(compress(runs.items(), map(not_, map(attrgetter(name), runs.values()))))


def failure_kind(job: Job) -> str:
    """What a failure of the job's current attempt leads to: a restart (auto-resume, retries left) or Failed."""
    return STOP_RESTART if job.auto_resume and job.attempt < job.max_retry else STOP_FAIL


@dataclass
class Run:
    attempt: int
    launched: bool = False
    after: list[str] = field(default_factory=list)  # engine ids of victims that must stop first
    stopping: str | None = None
    stop_reason: str = ""
    exits: dict[str, str] = field(default_factory=dict)  # rank -> reason
    codes: dict[str, int | None] = field(default_factory=dict)  # rank -> exit code (None: signal)
    slots: dict[str, list[int]] = field(default_factory=dict)  # node -> accelerator slots (taken at launch)
    nodes: list[str] = field(default_factory=list)  # where the engine placed the attempt, in rank order
    stop_at: float | None = None  # when the stop was asked
    before_stop: list[str] = field(default_factory=list)  # ranks that had ended on their own before it
    # elastic jobs (fairpod.server.core.transitions.resize): ranks a shrink is stopping (rank -> node), ranks a growth will start
    removing: dict[str, str] = field(default_factory=dict)
    adding: list[int] = field(default_factory=list)
    starting: list[int] = field(default_factory=list)  # new ranks with their slots, being started (until recorded)
    gone: dict[str, float] = field(default_factory=dict)  # removed ranks -> when their replica ended
    shrunk_at: float | None = None  # the last shrink (the engine's hold-off before growing again)
    # what each ended replica used, read from its cgroup (fairpod.sandbox): rank -> cpu_seconds, memory_peak_bytes
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)
    ports: list[int] = field(default_factory=list)  # a service's port per rank (fairpod.server.core.transitions.serving)
    # a service's replicas that exited in a row: rank -> [exits in a row, when it may start again] (serving)
    crashes: dict[str, list[float]] = field(default_factory=dict)
    # a service's replicas being drained: rank -> when their SIGTERM is due (server.services)
    drain_until: dict[str, float] = field(default_factory=dict)
    # resilience: ranks that said they are ready (fairpod.sdk.ready), when the whole gang was (server.core.transitions.readiness);
    # restarts in place of this attempt ([rank, when]) and the ranks whose restart is due (server.core.transitions.restarts)
    ready: list[str] = field(default_factory=list)
    ready_at: float | None = None
    restarts: list[list[float]] = field(default_factory=list)
    restart_due: list[int] = field(default_factory=list)
    good_from: float | None = None  # work before this is accounted for (server.accounting.goodput): the last restart in place
    log_faults: dict[str, str] = field(default_factory=dict)  # rank -> the log rule that stopped it (server.logrules)
    # peer recovery (server.restarts): ranks restarted in place that wait for a peer's state -> [since, why]
    recovering: dict[str, list[Any]] = field(default_factory=dict)
    # replicas moving off a lost node (server.core.transitions.relocation): rank -> [the node it leaves, why], until
    # its exit there is taken
    moving: dict[str, list[str]] = field(default_factory=dict)

    def record_usage(self, rank: int, cpu_seconds: float | None, memory_peak_bytes: int | None) -> dict[str, Any]:
        """Keep what a replica used; the data of its ``ReplicaUsage`` event ({} when nothing was measured)."""
        if cpu_seconds is None and memory_peak_bytes is None:
            return {}
        self.usage[str(rank)] = use = {"cpu_seconds": cpu_seconds, "memory_peak_bytes": memory_peak_bytes}
        return {"rank": rank, "attempt": self.attempt, **use}


    def to_json(self) -> dict[str, Any]:
        """``dataclasses.asdict`` of the run (its fields in order, lists and dicts copied), written out: asdict's
        generic walk was a fifth of a reconcile turn that admits thousands of jobs."""
        return {k: _plain(v) for k, v in self.__dict__.items()}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None, attempt: int) -> Run:
        if not d or d.get("attempt") != attempt:
            return cls(attempt=attempt)
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


def _plain(v: Any) -> Any:
    """A copy of a JSON value (lists and dicts copied all the way down)."""
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


class SlotsBusy(Exception):
    """A node has fewer free accelerator slots than a replica asks for (they are still held by a stopping job)."""


class Slots:
    """Which accelerator slots of each node are taken, so jobs on one node get disjoint devices. A replica gets
    exactly the slots its job asks for, or none at all (:class:`SlotsBusy`): never fewer."""

    def __init__(self) -> None:
        self.used: dict[str, set[int]] = {}

    def free(self, node: str, size: int) -> list[int]:
        used = self.used.get(node, set())
        return [i for i in range(size) if i not in used]

    def take(self, node: str, count: int, size: int, per_gpu: int = 1) -> list[int]:
        """``count`` free slots of ``node`` (of ``size``); SlotsBusy (taking none) if fewer are free. With MIG
        partitions (``per_gpu`` slots make one GPU), all on one GPU when one has room: the GPU with the fewest
        free partitions that still holds them (best fit, so that whole GPUs stay free); else lowest first."""
        free = self.free(node, size)
        if len(free) < count:
            raise SlotsBusy(f"node {node}: {len(free)} of {size} accelerator slots free, {count} asked")
        pick = free[:count]
        if per_gpu > 1 and count <= per_gpu:
            by_gpu: dict[int, list[int]] = {}
            for i in free:
                by_gpu.setdefault(i // per_gpu, []).append(i)
            fits = [(len(v), gpu) for gpu, v in by_gpu.items() if len(v) >= count]
            if fits:
                pick = by_gpu[min(fits)[1]][:count]
        self.used.setdefault(node, set()).update(pick)
        return pick

    def take_all(self, nodes: list[str], count: int, size: int, per_gpu: int = 1) -> dict[str, list[int]]:
        """``count`` slots on every node of ``nodes``, all or none (SlotsBusy)."""
        taken: dict[str, list[int]] = {}
        try:
            for node in nodes:
                taken[node] = self.take(node, count, size, per_gpu)
        except SlotsBusy:
            for node, slots in taken.items():
                self.give_back(node, slots)
            raise
        return taken

    def mark(self, node: str, slots: list[int]) -> None:
        self.used.setdefault(node, set()).update(slots)

    def give_back(self, node: str, slots: list[int]) -> None:
        self.used.get(node, set()).difference_update(slots)


def usage_message(job_name: str, use: dict[str, Any]) -> str:
    cpu, peak = use.get("cpu_seconds"), use.get("memory_peak_bytes")
    parts = ([f"{cpu:.2f} CPU-seconds"] if cpu is not None else []) + (
        [f"peak memory {peak / 2**20:.1f} MiB"] if peak is not None else [])
    return f"job {job_name} replica {use['rank']} (attempt {use['attempt']}) used {', '.join(parts)}"
