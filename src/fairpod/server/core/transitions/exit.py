"""A replica's exit, taken once: a replica a shrink removed, a service's replica (it starts again), a fault (a
restart in place, or the attempt stops), the last replica of a job done (it succeeds), or the last of a stopping
attempt (:func:`fairpod.server.core.transitions.stop.stopped`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairpod.executors.base import ReplicaExit
from fairpod.model.jobs import JobState
from fairpod.model.keys import job_id_of
from fairpod.server.core.transitions import launch, resize, restarts, serving, stop
from fairpod.server.runs import STOP_DONE, STOP_PREEMPT, failure_kind, usage_message

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState


def exit(cp: CoreState, e: ReplicaExit) -> None:
    """A replica ended. Taking the same exit twice changes nothing (exits are re-delivered until the store
    has committed them)."""
    jid = job_id_of(e.job)
    run = cp.runs.get(jid) if jid is not None else None
    if run is None or jid is None or run.attempt != e.attempt or str(e.rank) in run.exits:
        return
    if resize.removed(run, e):  # an elastic job shrank: that replica's end ends nothing else
        resize.replica_gone(cp, jid, run, e)
        return
    job = cp.store.get_job(jid)
    if job is None:
        return
    if not run.launched and e.started:  # started, but the control plane died before it recorded that
        launch.started(cp, job, run)
        job = cp.store.get_job(jid) or job
    if job.spec.service is not None and run.stopping is None and job.state == JobState.RUNNING:
        serving.replica_exited(cp, job, run, e)  # a service runs until deleted: that replica starts again
        return
    run.exits[str(e.rank)] = e.reason
    run.codes[str(e.rank)] = e.returncode
    if use := run.record_usage(e.rank, e.cpu_seconds, e.memory_peak_bytes):
        cp.event("ReplicaUsage", usage_message(job.name, use), job, **use)
    if e.reason.startswith("image pull failed"):  # the job's image, not its node (fairpod.sandbox.container)
        cp.event("ImagePullFailed", f"job {job.name} replica {e.rank}: {e.reason}", job, attempt=e.attempt)
    if run.stop_at is not None and getattr(cp.clock, "from_wall", float)(e.ended_at) < run.stop_at:
        run.before_stop.append(str(e.rank))  # it ended on its own before the stop was asked
    if run.stopping is None:
        # a log rule stopped it (server/core/transitions/logrules.py), or its node was lost (relocation.py)
        faulted = not e.ok or str(e.rank) in run.log_faults or str(e.rank) in run.moving
        if not e.started:  # its launch never reached its node: the attempt stops, the job is queued again
            stop.begin_stop(cp, job, run, STOP_PREEMPT, f"replica {e.rank} {e.reason}")
        elif faulted and restarts.decide(cp, job, run, e):  # restart that replica only (server/core/transitions/restarts.py)
            pass
        elif faulted:
            stop.begin_stop(cp, job, run, failure_kind(job), f"replica {e.rank} {restarts.why(run, e)}")
        elif len(run.exits) == job.nodes and not run.restart_due:
            stop.finish(cp, job, run, JobState.SUCCEEDED, "all replicas exited 0")
            return
        elif job.spec.elastic:  # torchrun's elastic agents exit 0 only once the group's training is done
            run.before_stop.append(str(e.rank))  # it ended on its own: whatever stop comes next, it finished
            stop.begin_stop(cp, job, run, STOP_DONE, f"replica {e.rank} finished the training; the other "
                            "replicas are stopped (an elastic job is done when one of its replicas is)")
    if run.stopping is not None and len(run.exits) >= job.nodes:
        stop.stopped(cp, job, run)
    else:
        cp._save_run(job, run)

