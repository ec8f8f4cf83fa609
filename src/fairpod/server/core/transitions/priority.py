"""A job's priority changed after submission (AWS Batch's and dstack's job priority updates): ``POST
/api/v1/jobs/{ref}/priority`` and ``fairpod set-priority``. The job keeps its place in the queue among jobs of its new
priority (its submit time and sequence stay), so no one must cancel and resubmit, losing the queue place.

The change is checked as a submit would be (the class exists; a runtime limit the job asked for stays within the new
class's maximum), written to the store (the job's spec names the class, its ``priority`` column the weight), recorded
as a ``JobPriorityChanged`` event and in the audit log, and given to the engine: a pending job is queued again under
its new key, a running job counts with its new priority as a preemption victim (or preemptor) from the next cycle,
which the change wakes. A finished job is refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairpod.model.jobs import resolve_job
from fairpod.server.errors import WrongState
from fairpod.server.runs import to_engine
from fairpod.store.records import Job

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState


def change(cp: CoreState, job: Job, priority_class: str | None, actor: str) -> Job:
    """Give ``job`` (read under the lock) the priority class ``priority_class`` (None: no class, the lowest)."""
    if job.state.finished:
        raise WrongState(f"job {job.name} is already {job.state.value}", "job finished")
    new_spec = job.spec.model_copy(update={"priority": priority_class})
    resolved = resolve_job(new_spec, cp.spec)  # ValueError: the caller's 422
    old = job.spec.priority
    if old == priority_class:
        return job
    job = cp.store.update_job(job.id, {"spec": new_spec.model_dump(mode="json"), "priority": resolved.priority})
    eid = to_engine(job.id)
    snap = cp.snap
    w = snap.pending.get(eid)
    if w is not None:  # queued again under its new key, with its submit time and sequence
        snap.remove_pending(eid)
        w.priority = resolved.priority
        snap.add_pending(w)
    w = snap.running.get(eid)
    if w is not None:
        w.priority = resolved.priority
    cp.event("JobPriorityChanged", f"priority class {old or '(none)'} -> {priority_class or '(none)'} by {actor}",
             job, old=old, new=priority_class, weight=resolved.priority)
    cp.store.append_audit(actor, "job.priority", f"{job.team}/{job.name}", {"id": job.id, "priority": priority_class})
    return job
