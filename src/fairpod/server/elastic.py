"""Elastic jobs in the control plane: applying the engine's Grow and Shrink decisions to a running attempt.

An elastic job (``min_nodes``..``max_nodes``) keeps one attempt while it changes size; the store's ``nodes``
is its replica count now and ``placement`` its nodes in rank order (``spec.nodes`` stays the minimum).

- **Shrink**: the replicas of the highest ranks get SIGTERM and, after the job's grace period, SIGKILL
  (``Resizing.stop_replicas``); the job stays Running. Their slots stay taken until they have exited, so the job
  admitted in their place starts only then. Their exits end nothing (``Run.removing``).
- **Grow**: the new ranks wait until no replica of the job is still being removed and their accelerator slots
  are free, then start beside the live ones on the same rendezvous address (``Resizing.add_replicas``).

Every replica gets ``FAIRPOD_MIN_NODES``, ``FAIRPOD_MAX_NODES`` and ``FAIRPOD_NODES`` (the count when it
started), so that ``torchrun --nnodes $FAIRPOD_MIN_NODES:$FAIRPOD_MAX_NODES --rdzv-backend c10d
--rdzv-endpoint $MASTER_ADDR:$MASTER_PORT`` re-forms the group at every change. Each change is one transition
under the control plane's lock: the store and the engine's snapshot change together (``ControlPlane._change``).
Only executors with the ``Resizing`` capability run elastic jobs (the local executor); others refuse them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from fairpod.executors.base import ExecutorError, JobLaunch, ReplicaExit, ReplicaLaunch, Resizing, capability
from fairpod.governance import Grow, Shrink
from fairpod.governance import elastic as rules
from fairpod.governance.snapshot import Snapshot
from fairpod.model.jobs import JobSpec, JobState
from fairpod.server.errors import InvalidJob
from fairpod.server.runs import Run, Slots, SlotsBusy, job_key
from fairpod.store.records import Job


class ControlPlane(Protocol):
    """What this module uses of ``fairpod.server.control.ControlPlane`` (no import of it: no cycle)."""

    store: Any
    executor: Any
    spec: Any
    snap: Snapshot
    runs: dict[int, Run]
    slots: Slots
    wake: threading.Event
    launch_env: Callable[[Job], dict[str, str]]
    clock: Callable[[], float]

    def event(self, kind: str, msg: str, job: Job | None = None, /, **data: Any) -> None: ...

    def _save_run(self, job: Job, run: Run, **changes: Any) -> Job: ...

    def _change(self) -> AbstractContextManager[None]: ...

    def checkpoint_root(self) -> Path: ...

    def _partition_devices(self, node: str, slots: list[int]) -> tuple[str, ...]: ...

    def _gpus_are_real(self, node: str) -> bool: ...

    def _partitions_per_gpu(self, node: str) -> int: ...

log = logging.getLogger("fairpod.control")


def check(cp: ControlPlane, spec: JobSpec) -> None:
    """InvalidJob if this control plane cannot run ``spec`` as an elastic job."""
    if spec.elastic and capability(cp.executor, Resizing) is None:
        raise InvalidJob(f"the {cp.executor.name} executor cannot grow or shrink a running job; elastic jobs "
                         "(max_nodes) need the local executor")


def workload_fields(job: Job) -> dict[str, Any]:
    """The engine's elastic fields of a job (none for a job of a fixed size)."""
    if not job.spec.elastic:
        return {}
    shrunk = (job.run_state or {}).get("shrunk_at") if job.state == JobState.RUNNING else None
    return {"min_n": job.spec.nodes, "max_n": job.spec.max_nodes, "resized": shrunk}


def env(job: Job, count: int | None = None) -> dict[str, str]:
    """The FAIRPOD_* variables an elastic job's replicas get (none for a job of a fixed size)."""
    if not job.spec.elastic:
        return {}
    return {"FAIRPOD_MIN_NODES": str(job.spec.nodes), "FAIRPOD_MAX_NODES": str(job.spec.max_nodes),
            "FAIRPOD_NODES": str(count if count is not None else job.nodes)}


def _running(cp: ControlPlane, jid: int) -> tuple[Job, Run] | None:
    job = cp.store.get_job(jid)
    run = cp.runs.get(jid)
    if job is None or run is None or job.state != JobState.RUNNING or run.stopping is not None:
        return None
    return job, run


def shrink(cp: ControlPlane, d: Shrink) -> None:
    """Stop the replicas of ``d.removed`` (the highest ranks); the job keeps running on ``d.nodes``."""
    got = _running(cp, int(d.job))
    if got is None:
        return
    job, run = got
    ranks = {n: i for i, n in enumerate(job.placement)}
    gone = sorted(ranks[n] for n in d.removed if n in ranks)
    launched = [r for r in gone if r not in run.adding] if run.launched else []
    for r in gone:
        node = job.placement[r]
        if r in launched:
            run.removing[str(r)] = node  # its slots go back when it has exited
        else:
            cp.slots.give_back(node, run.slots.pop(node, []))
        if r in run.adding:
            run.adding.remove(r)
    run.nodes = list(d.nodes)
    run.shrunk_at = cp.clock()
    cp._save_run(job, run, placement=list(d.nodes), nodes=len(d.nodes))
    cp.event("JobShrunk", f"job {job.name}: {d.reason}", job, by=d.by, preemption=d.kind,
             removed=list(d.removed), nodes=len(d.nodes))
    res = capability(cp.executor, Resizing)
    if launched and res is not None:
        res.stop_replicas(job_key(job), run.attempt, launched, job.spec.termination_grace_seconds)


def grow(cp: ControlPlane, d: Grow) -> None:
    """The job runs on ``d.nodes`` from now on: its new ranks start once :func:`ready` finds their slots free."""
    got = _running(cp, int(d.job))
    if got is None:
        return
    job, run = got
    old = len(job.placement)
    if run.launched:
        run.adding.extend(range(old, len(d.nodes)))
    run.nodes = list(d.nodes)
    cp._save_run(job, run, placement=list(d.nodes), nodes=len(d.nodes))
    cp.event("JobGrown", f"job {job.name}: {d.reason}", job, added=list(d.added), nodes=len(d.nodes))


def ready(cp: ControlPlane) -> list[tuple[Job, Run, list[int]]]:
    """Grown jobs whose new ranks can start now: none of their replicas is still being removed, and the slots
    of the new ranks are free (taken and stored now)."""
    out = []
    cat = cp.spec.catalog()
    for jid, run in list(cp.runs.items()):
        if not run.adding or not run.launched or run.stopping is not None or run.removing:
            continue
        job = cp.store.get_job(jid)
        if job is None or job.state != JobState.RUNNING:
            continue
        ranks = sorted(r for r in run.adding if r < len(job.placement))
        taken: dict[str, list[int]] = {}
        try:
            for r in ranks:
                node = job.placement[r]
                taken[node] = cp.slots.take(node, job.acc, cat[job.instance_type].accelerators,
                                            cp._partitions_per_gpu(node))
        except SlotsBusy as e:
            for node, slots in taken.items():
                cp.slots.give_back(node, slots)
            log.debug("job %s waits to grow: %s", job.name, e)
            continue
        run.slots.update(taken)
        for r in ranks:
            run.gone.pop(str(r), None)
        run.adding = []
        cp._save_run(job, run)
        out.append((job, run, ranks))
    return out


def launch(cp: ControlPlane, grown: list[tuple[Job, Run, list[int]]]) -> None:
    """Start the new ranks :func:`ready` found ready (after the store has committed their slots)."""
    res = capability(cp.executor, Resizing)
    for job, run, ranks in grown:
        if res is None:
            return
        try:
            devices = {job.placement[r]: cp._partition_devices(job.placement[r], run.slots[job.placement[r]])
                       for r in ranks}
            res.add_replicas(JobLaunch(
                job=job_key(job), team=job.team, attempt=job.attempt, command=list(job.spec.command),
                checkpoint_dir=str(cp.checkpoint_root() / job.team / job_key(job)),
                env={**job.spec.env, **cp.launch_env(job), **env(job),
                     "FAIRPOD_PREEMPTION_COUNT": str(job.preemptions)},
                workdir=job.spec.workdir, grace_seconds=job.spec.termination_grace_seconds,
                run_as=cp.spec.run_as(job.team), world=len(job.placement),
                replicas=tuple(ReplicaLaunch(rank=r, node=job.placement[r],
                                             accelerators=tuple(run.slots[job.placement[r]]),
                                             real_gpus=cp._gpus_are_real(job.placement[r]),
                                             devices=devices[job.placement[r]],
                                             mcpu=job.mcpu, mib=job.mib) for r in ranks)))
        except ExecutorError as e:
            _grow_failed(cp, job, run, ranks, str(e))


def _grow_failed(cp: ControlPlane, job: Job, run: Run, ranks: list[int], why: str) -> None:
    """New ranks that could not start: the job goes back to the size it had, in the store and the engine."""
    keep = job.placement[:min(ranks)]
    with cp._change():
        for r in ranks:
            node = job.placement[r]
            cp.slots.give_back(node, run.slots.pop(node, []))
        run.nodes = list(keep)
        cp._save_run(job, run, placement=keep, nodes=len(keep))
        w = cp.snap.running.get(str(job.id))
        if w is not None:
            rules.resize(cp.snap, w, list(keep))
        cp.event("JobShrunk", f"job {job.name}: could not grow: {why}", job, removed=job.placement[len(keep):],
                 nodes=len(keep))


def removed(run: Run, e: ReplicaExit) -> bool:
    """Is ``e`` the exit of a replica a shrink removed (also when delivered again)?"""
    return str(e.rank) in run.removing or run.gone.get(str(e.rank)) == e.ended_at


def replica_gone(cp: ControlPlane, jid: int, run: Run, e: ReplicaExit) -> None:
    """A replica removed by a shrink has exited: its slots are free again; the job goes on."""
    if str(e.rank) not in run.removing:
        return  # taken already
    node = run.removing.pop(str(e.rank))
    run.gone[str(e.rank)] = e.ended_at  # the same exit again (until acknowledged) is known
    cp.slots.give_back(node, run.slots.pop(node, []))
    job = cp.store.get_job(jid)
    if job is not None:
        cp._save_run(job, run)
    cp.wake.set()
