"""The end of an attempt: a stop begun (cancel, preemption, failure, restart, readiness timeout, done), every
replica stopped, and the job's next state: finished (Succeeded, Failed, Cancelled) or back in its queue."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fairpod.model.jobs import JobState
from fairpod.server.accounting import goodput
from fairpod.server.core.transitions import backoff, goodput_spans, readiness
from fairpod.server.runs import (
    STOP_CANCEL,
    STOP_DONE,
    STOP_FAIL,
    STOP_NOT_READY,
    STOP_PREEMPT,
    STOP_RESTART,
    Run,
    failure_kind,
    job_key,
)
from fairpod.store.records import Job

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState


def begin_stop(cp: CoreState, job: Job, run: Run, kind: str, reason: str) -> None:
    """Ask the executor to stop the attempt; the job's next state waits for every replica's exit."""
    if run.stopping == STOP_CANCEL:
        return
    if run.stopping is None:
        run.stop_at = cp.clock()
    run.stopping = kind
    run.stop_reason = reason
    changes: dict[str, Any] = {"reason": reason}
    if kind == STOP_PREEMPT:
        changes["state"] = JobState.PREEMPTED
    cp._save_run(job, run, **changes)
    if run.launched:
        send_stop(cp, job, run)


def send_stop(cp: CoreState, job: Job, run: Run) -> None:
    """The executor stops the attempt once the store has committed that it is stopping (``after_commit``): a
    crash in between leaves a stored stop that start-up sends again (``ControlPlane._carry_out``)."""
    key, attempt, grace = job_key(job), run.attempt, job.spec.termination_grace_seconds
    cp.store.after_commit(lambda: cp.executor.stop(key, attempt, grace))


def finish(cp: CoreState, job: Job, run: Run, state: JobState, reason: str) -> None:
    goodput_spans.account(cp, job, run, None if state == JobState.SUCCEEDED else
                          "cancelled" if state == JobState.CANCELLED else goodput.cause_of(run.stopping, reason))
    cp._release(job, run)
    if state == JobState.SUCCEEDED:
        cp.eta.typical.observe(job, cp.clock())
    job = cp.store.update_job(job.id, {"state": state, "reason": reason, "finished_at": cp.clock(),
                                       "run_state": run.to_json()})
    cp.event(f"Job{state.value}", f"job {job.name} {state.value.lower()}: {reason}", job)
    cp.wake.set()


def stopped(cp: CoreState, job: Job, run: Run) -> None:
    """Every replica of a stopping attempt has ended: take the job to its next state."""
    kind = run.stopping
    if kind == STOP_PREEMPT and run.before_stop and len(run.exits) >= job.nodes:
        # replicas that had ended on their own before the preemption reached them decide
        natural = {r: run.codes.get(r) for r in run.before_stop}
        if len(natural) == job.nodes and all(c == 0 for c in natural.values()):
            finish(cp, job, run, JobState.SUCCEEDED, "all replicas exited 0")
            return
        failed = sorted(r for r, c in natural.items() if c != 0)
        if failed:
            kind = run.stopping = failure_kind(job)
            run.stop_reason = f"replica {failed[0]} {run.exits[failed[0]]}"
    finished = sorted(r for r in run.before_stop if run.codes.get(r) == 0)
    if job.spec.elastic and kind != STOP_CANCEL and finished:
        # a replica of an elastic job that ended 0 on its own finished the training: the others' ends (the
        # rendezvous store gone with it, a stop) do not undo that (Kubeflow's PyTorchJob: elastic success
        # is any worker's)
        kind = run.stopping = STOP_DONE
        run.stop_reason = f"replica {finished[0]} finished the training (elastic)"
    if kind == STOP_DONE:
        finish(cp, job, run, JobState.SUCCEEDED, run.stop_reason)
    elif kind == STOP_CANCEL:
        finish(cp, job, run, JobState.CANCELLED, run.stop_reason)
    elif kind == STOP_FAIL:
        finish(cp, job, run, JobState.FAILED, run.stop_reason)
    elif kind in (STOP_PREEMPT, STOP_RESTART, STOP_NOT_READY):
        goodput_spans.account(cp, job, run, goodput.cause_of(kind, run.stop_reason))
        cp._release(job, run)
        now = cp.clock()
        changes: dict[str, Any] = {"state": JobState.PENDING, "enqueued_at": now, "run_state": run.to_json(),
                                   "placement": [], "borrowed_from": {}, "nodes": job.spec.nodes}
        if kind == STOP_RESTART:
            changes["attempt"] = job.attempt + 1
            changes["reason"] = f"restarting: {run.stop_reason}"
            changes.update(backoff.restart_changes(cp.spec.policy, job, changes["run_state"], run.stop_reason,
                                                   now))
        elif kind == STOP_NOT_READY:  # back to its queue after a backoff, same attempt (server/core/transitions/readiness.py)
            changes.update(readiness.requeue_changes(cp, job, changes["run_state"], run.stop_reason, now))
        job = cp.store.update_job(job.id, changes)
        if kind == STOP_RESTART:
            cp.event("JobRestarting", f"job {job.name}: {run.stop_reason} (restart {job.attempt} of "
                     f"{job.max_retry})", job, attempt=job.attempt, restart="full")
        else:
            cp.event("JobRequeued", f"job {job.name} stopped and is back in its queue", job)
        if not backoff.hold(cp, job):
            cp.snap.add_pending(cp.workload(job))
        cp.wake.set()

