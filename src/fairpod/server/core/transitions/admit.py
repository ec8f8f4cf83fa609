"""Admission and preemption: the engine's Admit makes a pending job Running on its nodes (it launches once its
victims have stopped: :mod:`fairpod.server.core.transitions.launch`); its Preempt stops a running one, which goes
back to its queue once every replica has ended (:func:`fairpod.server.core.transitions.stop.stopped`); its Wait
gives a pending job the reason it waits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairpod.executors import registry
from fairpod.governance import Admit, Preempt, Wait
from fairpod.model.jobs import JobState
from fairpod.sandbox import capabilities
from fairpod.server.core.transitions import stop
from fairpod.server.runs import STOP_PREEMPT, Run, from_engine

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState


def admit(cp: CoreState, d: Admit) -> None:
    """The engine admitted a pending job: Running on ``d.nodes``; it launches once ``d.after`` stopped."""
    job = cp.store.get_job(from_engine(d.job))
    if job is None or job.state != JobState.PENDING:
        return
    run = Run(attempt=job.attempt, after=list(d.after), nodes=list(d.nodes))
    cp.runs[job.id] = run
    now = cp.clock()
    job = cp._save_run(job, run, state=JobState.RUNNING, placement=list(d.nodes), reason=d.reason,
                       nodes=len(d.nodes),  # an elastic job's size now
                       borrowed_from=dict(d.lenders), started_at=now,
                       **({"instance_type": d.itype, "acc": d.req[0], "mcpu": d.req[1], "mib": d.req[2]}
                          if d.itype and d.req else {}),  # a job with fallback types: the one it starts on
                       **({} if job.first_started_at else {"first_started_at": now}))
    cp.event("JobAdmitted", f"job {job.name}: {d.reason}", job, nodes=list(d.nodes), after=list(d.after))


def preempt(cp: CoreState, d: Preempt) -> None:
    """The engine preempts a running job: it stops, then goes back to its queue (``stopped``)."""
    jid = from_engine(d.job)
    job = cp.store.get_job(jid)
    run = cp.runs.get(jid)
    cp._unsnap(jid)  # it goes back to its queue once it has stopped
    if job is None or run is None or job.state != JobState.RUNNING or run.stopping is not None:
        return  # finished meanwhile, or already stopping: no second preemption for one stop
    job = cp.store.update_job(job.id, {"preemptions": job.preemptions + 1})
    cp.event("JobPreempted", f"job {job.name}: {d.reason}", job, by=d.by, preemption=d.kind)
    stop.begin_stop(cp, job, run, STOP_PREEMPT, d.reason)
    if not run.launched:
        stop.stopped(cp, cp.store.get_job(job.id) or job, run)


def isolation_gap(cp: CoreState) -> str | None:
    """Why no node takes a job under ``cluster.isolation: required`` (fairpod.sandbox.capabilities)."""
    return capabilities.required_gap(cp.spec.cluster.isolation, registry.elsewhere(cp.executor.name))


def wait_reason(cp: CoreState, d: Wait) -> str:
    """A job back in its queue after a preemption says so until it runs again."""
    if (gap := isolation_gap(cp)) is not None:
        return gap
    job = cp.store.get_job(from_engine(d.job))
    info = (job.run_state or {}) if job is not None else {}
    if info.get("stopping") == STOP_PREEMPT and info.get("stop_reason"):
        return f"{d.reason} (requeued: {info['stop_reason']})"
    return d.reason

