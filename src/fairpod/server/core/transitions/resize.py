"""Elastic jobs: applying the engine's Grow and Shrink decisions to a running attempt.

An elastic job (``min_nodes``..``max_nodes``) keeps one attempt while it changes size; the store's ``nodes``
is its replica count now and ``placement`` its nodes in rank order (``spec.nodes`` stays the minimum).

- **Shrink**: the replicas of the highest ranks get SIGTERM and, after the job's grace period, SIGKILL
  (``Resizing.stop_replicas``); the job stays Running. Their slots stay taken until they have exited, so the job
  admitted in their place starts only then. Their exits end nothing (``Run.removing``).
- **Grow**: the new ranks wait until no replica of the job is still being removed and their accelerator slots
  are free, then start beside the live ones on the same rendezvous address (``Resizing.add_replicas``), with the
  launch :func:`fairpod.server.core.transitions.launch.build_launch` builds for a first start as well.

Every replica gets ``FAIRPOD_MIN_NODES``, ``FAIRPOD_MAX_NODES`` and ``FAIRPOD_NODES`` (the count when it
started), so that ``torchrun --nnodes $FAIRPOD_MIN_NODES:$FAIRPOD_MAX_NODES --rdzv-backend c10d
--rdzv-endpoint $MASTER_ADDR:$MASTER_PORT`` re-forms the group at every change. Each change is one transition
under the control plane's lock: the store and the engine's snapshot change together (``ControlPlane._change``).
Only executors with the ``Resizing`` capability run elastic jobs (the local executor); others refuse them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from fairpod.executors.base import Executor, ExecutorError, ReplicaExit, Resizing, Traits, capability
from fairpod.governance import Grow, Shrink
from fairpod.governance import elastic as rules
from fairpod.governance.kinds import kind_fields
from fairpod.model.jobs import JobSpec, JobState
from fairpod.server.core.transitions import serving
from fairpod.server.errors import InvalidJob
from fairpod.server.runs import Run, SlotsBusy, from_engine, having, job_key, to_engine
from fairpod.store.records import EngineJob, Job

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState

log = logging.getLogger("fairpod.control")


def check(executor: Executor | Traits, spec: JobSpec) -> None:
    """InvalidJob if ``executor`` cannot run ``spec`` as an elastic job."""
    if spec.elastic and not Traits.of(executor).resizing:
        raise InvalidJob(f"the {executor.name} executor cannot grow or shrink a running job; elastic jobs "
                         "(max_nodes) need the local executor")


def workload_fields(job: EngineJob) -> dict[str, Any]:
    """The engine's fields of a job's kind and size (``governance.kinds``) and, elastic, when it last shrank."""
    out = kind_fields(job.kind, job.spec_nodes, job.max_nodes)
    if out["max_n"]:
        out["resized"] = (job.run_state or {}).get("shrunk_at") if job.state == JobState.RUNNING else None
    return out


def env(job: Job, count: int | None = None) -> dict[str, str]:
    """The FAIRPOD_* variables an elastic job's replicas get (none for a job of a fixed size)."""
    if not job.spec.elastic:
        return {}
    return {"FAIRPOD_MIN_NODES": str(job.spec.nodes), "FAIRPOD_MAX_NODES": str(job.spec.max_nodes),
            "FAIRPOD_NODES": str(count if count is not None else job.nodes)}


def removed(run: Run, e: ReplicaExit) -> bool:
    """Is ``e`` the exit of a replica a shrink removed (also when delivered again)?"""
    return str(e.rank) in run.removing or run.gone.get(str(e.rank)) == e.ended_at


def _running_elastic(cp: CoreState, jid: int) -> tuple[Job, Run] | None:
    job = cp.store.get_job(jid)
    run = cp.runs.get(jid)
    if job is None or run is None or job.state != JobState.RUNNING or run.stopping is not None:
        return None
    return job, run


def shrink(cp: CoreState, d: Shrink) -> None:
    """Stop the replicas of ``d.removed`` (the highest ranks); the job keeps running on ``d.nodes``."""
    got = _running_elastic(cp, from_engine(d.job))
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
        run.crashes.pop(str(r), None)  # a service's restart backoff goes with the rank
    run.nodes = list(d.nodes)
    run.shrunk_at = cp.clock()
    cp._save_run(job, run, placement=list(d.nodes), nodes=len(d.nodes))
    cp.event("JobShrunk", f"job {job.name}: {d.reason}", job, by=d.by, preemption=d.kind,
               removed=list(d.removed), nodes=len(d.nodes))
    if launched:
        _stop_removed(cp, job, run, launched)


def _stop_removed(cp: CoreState, job: Job, run: Run, ranks: list[int]) -> None:
    """SIGTERM to the removed ranks once the store has committed their removal (``run.removing``): a crash in
    between leaves the removal stored, and start-up sends it again; their exits are never taken for
    ordinary ones."""
    res = capability(cp.executor, Resizing)
    if res is None:
        return
    key, attempt, grace = job_key(job), run.attempt, job.spec.termination_grace_seconds
    if job.spec.service is not None and cp.services is not None:  # drained first (server/core/transitions/services.py)
        drain, jid = job.spec.service.drain_seconds, job.id
        cp.store.after_commit(lambda: cp.services.drain(jid, key, attempt, ranks, grace, drain))
        return
    cp.store.after_commit(lambda: res.stop_replicas(key, attempt, ranks, grace))


def grow(cp: CoreState, d: Grow) -> None:
    """The job runs on ``d.nodes`` from now on: its new ranks start once :func:`grow_ready` finds their
    slots free."""
    got = _running_elastic(cp, from_engine(d.job))
    if got is None:
        return
    job, run = got
    old = len(job.placement)
    if run.launched:
        run.adding.extend(range(old, len(d.nodes)))
    run.nodes = list(d.nodes)
    cp._save_run(job, run, placement=list(d.nodes), nodes=len(d.nodes))
    cp.event("JobGrown", f"job {job.name}: {d.reason}", job, added=list(d.added), nodes=len(d.nodes))


def grow_ready(cp: CoreState) -> list[tuple[Job, Run, list[int]]]:
    """Grown jobs whose new ranks can start now: none of their replicas is still being removed, and the slots
    of the new ranks are free (taken and stored now)."""
    out = []
    cat = cp.spec.catalog()
    for jid, run in having(cp.runs, "adding"):  # the few elastic jobs growing: filtered in C
        if not run.adding or not run.launched or run.stopping is not None or run.removing:
            continue
        job = cp.store.get_job(jid)
        if job is None or job.state != JobState.RUNNING:
            continue
        now = cp.clock()  # a service's replica in its restart backoff waits (control.serving)
        ranks = sorted(r for r in run.adding if r < len(job.placement) and not serving.backing_off(run, r, now))
        if not ranks:
            continue
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
        run.adding = [r for r in run.adding if r not in ranks]
        run.starting = ranks  # stored with their slots: after a crash, start-up finishes starting them
        cp._save_run(job, run)
        out.append((job, run, ranks))
    return out


def launch_grown(cp: CoreState, grown: list[tuple[Job, Run, list[int]]]) -> None:
    """Start the new ranks :func:`grow_ready` found ready (after the store has committed their slots), and
    record that they started (``run.starting`` emptied, committed with the turn)."""
    res = capability(cp.executor, Resizing)
    for job, run, ranks in grown:
        if res is None:
            return
        try:
            res.add_replicas(cp.build_launch(job, run, ranks))
        except ExecutorError as e:
            _grow_failed(cp, job, run, ranks, str(e))
            continue
        run.starting = []
        cp._save_run(cp.store.get_job(job.id) or job, run)


def finish_growth(cp: CoreState, job: Job, run: Run) -> None:
    """Start-up: new ranks stored as being started when the control plane died. Those the executor does not
    know (never started, or undone at adoption as a cut launch) are started now; those it knows ran."""
    res = capability(cp.executor, Resizing)
    ranks = sorted(r for r in run.starting if r < len(job.placement))
    if res is not None and job.state == JobState.RUNNING and run.stopping is None:
        missing = sorted(set(ranks) - res.replica_ranks(job_key(job), run.attempt))
        if missing:
            try:
                res.add_replicas(cp.build_launch(job, run, missing))
            except ExecutorError as e:
                run.starting = []
                _grow_failed(cp, job, run, missing, str(e))
                return
    run.starting = []
    cp._save_run(cp.store.get_job(job.id) or job, run)


def _grow_failed(cp: CoreState, job: Job, run: Run, ranks: list[int], why: str) -> None:
    """New ranks that could not start: the job goes back to the size it had, in the store and the engine."""
    keep = job.placement[:min(ranks)]
    run.starting = []
    with cp._change():
        for r in ranks:
            node = job.placement[r]
            cp.slots.give_back(node, run.slots.pop(node, []))
        run.nodes = list(keep)
        cp._save_run(job, run, placement=keep, nodes=len(keep))
        w = cp.snap.running.get(to_engine(job.id))
        if w is not None:
            rules.resize(cp.snap, w, list(keep))
        cp.event("JobShrunk", f"job {job.name}: could not grow: {why}", job,
                   removed=job.placement[len(keep):], nodes=len(keep))


def replica_gone(cp: CoreState, jid: int, run: Run, e: ReplicaExit) -> None:
    """A replica removed by a shrink has exited: its slots are free again; the job goes on."""
    if str(e.rank) not in run.removing:
        return  # taken already
    node = run.removing.pop(str(e.rank))
    run.drain_until.pop(str(e.rank), None)  # a service's drain (server.services) is over
    run.gone[str(e.rank)] = e.ended_at  # the same exit again (until acknowledged) is known
    cp.slots.give_back(node, run.slots.pop(node, []))
    job = cp.store.get_job(jid)
    if job is not None:
        cp._save_run(job, run)
    cp.wake.set()
