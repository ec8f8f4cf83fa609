"""Job arrays' throttle in the control plane: ``%N`` lets at most N tasks of an array run at a time.

Each task is a job of its own (``NAME-INDEX``) whose env carries the array variables
(``fairpod.model.arrays.task_env``). The throttle keeps the tasks beyond the first N out of the engine's
snapshot ("held", still Pending in the store); each reconcile turn lets held tasks in as others finish. The
holds are rebuilt from the store (the tasks' env) whenever the snapshot is, so they survive a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fairpod.model.arrays import ArrayError, parse_array, task_env
from fairpod.model.jobs import JobSpec, JobState
from fairpod.server.arrays import array_of
from fairpod.server.core.api import Throttled
from fairpod.server.errors import InvalidJob
from fairpod.server.runs import to_engine
from fairpod.store.records import EngineJob, Job

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState

HELD_REASON = "held: the array runs at most {limit} tasks at a time"


@dataclass
class Hold:
    limit: int
    tasks: list[int] = field(default_factory=list)  # job ids of the array, in task order
    held: list[int] = field(default_factory=list)  # job ids kept out of the snapshot, in task order


def hold_back(cp: CoreState, jobs: list[EngineJob]) -> None:
    """After the snapshot was (re)built from ``jobs`` (the unfinished ones): take out of it the pending tasks
    of throttled arrays beyond their limit."""
    holds: dict[int, Hold] = {}
    for job in sorted(jobs, key=lambda j: j.id):
        arr = array_of(job)
        if arr is None or arr[1] is None:
            continue
        h = holds.setdefault(arr[0], Hold(arr[1]))
        h.tasks.append(job.id)
    for h in holds.values():
        active = sum(1 for jid in h.tasks if to_engine(jid) in cp.snap.running)
        for jid in h.tasks:
            if to_engine(jid) not in cp.snap.pending:
                continue
            if active < h.limit:
                active += 1
            else:
                cp.snap.remove_pending(to_engine(jid))
                h.held.append(jid)
    cp.array_holds = {k: h for k, h in holds.items() if h.held}


def release(cp: CoreState) -> None:
    """Let held tasks into the snapshot while their array runs fewer than its limit (under ``cp.lock``)."""
    holds = cp.array_holds
    for aid, h in list(holds.items()):
        snap = cp.snap
        active = sum(1 for jid in h.tasks if to_engine(jid) in snap.running or to_engine(jid) in snap.pending)
        while h.held and active < h.limit:
            jid = h.held.pop(0)
            job = cp.store.get_job(jid)
            if job is None or job.state != JobState.PENDING:  # cancelled while held
                continue
            snap.add_pending(cp.workload(job))
            active += 1
        if not h.held:
            del holds[aid]


def forget(cp: CoreState, ids: list[int]) -> None:
    """Cancelled tasks leave their arrays' held lists at once (under ``cp.lock``): ``release`` would otherwise
    read each of them back from the store, one by one, inside the next turns (a 10,000-task array's cancel)."""
    gone = set(ids)
    for h in cp.array_holds.values():
        if gone.intersection(h.held):
            h.held = [j for j in h.held if j not in gone]


def plan(spec: JobSpec, text: str) -> tuple[list[int], int | None]:
    """The task indices and the throttle of the array ``text`` for a job named ``spec.name``."""
    try:
        indices, limit = parse_array(text)
    except ArrayError as e:
        raise InvalidJob(str(e), "invalid array") from None
    longest = len(str(indices[-1])) + 1
    if len(spec.name) + longest > 63:
        raise InvalidJob(f"the job name {spec.name!r} is too long for an array of {indices[-1] + 1} tasks: "
                         "tasks are named NAME-INDEX, at most 63 characters", "invalid array")
    return indices, limit


def insert_tasks(t: Any, spec: JobSpec, resolved: Any, text: str, indices: list[int], limit: int | None,
                 actor: str) -> list[Job]:
    """Insert every task of the array in the store transaction ``t`` (with its event and audit entry)."""
    def task(i: int, aid: int) -> JobSpec:
        env = {**spec.env, **task_env(aid, spec.name, indices[i], indices, limit)}
        return spec.model_copy(update={"name": f"{spec.name}-{indices[i]}", "env": env})

    def reason(i: int) -> str:
        return "queued" if limit is None or i < limit else HELD_REASON.format(limit=limit)

    # the array's id is its first task's, as in Slurm: known once that one is stored; the later tasks are
    # stored with it at once, in one statement
    first = t.insert_job(task(0, 0), resolved, reason=reason(0))
    aid = first.id
    env = {**first.spec.env, "FAIRPOD_ARRAY_JOB_ID": str(aid), "SLURM_ARRAY_JOB_ID": str(aid)}
    tasks = [t.update_job(aid, {"spec": first.spec.model_copy(update={"env": env}), "array_id": aid,
                                "array_limit": limit})]
    rest = range(1, len(indices))
    tasks += t.insert_tasks([task(i, aid) for i in rest], resolved, [reason(i) for i in rest], aid, limit)
    t.append_events([{"kind": "JobSubmitted", "message": f"job array {spec.name} ({len(tasks)} tasks"
                      f"{f', {limit} at a time' if limit else ''}) submitted by {actor}",
                      "job_id": aid, "team": spec.team, "data": {"actor": actor, "array": text}}])
    t.append_audit(actor, "job.submit", f"{spec.team}/{spec.name}", {"id": aid, "array": text, "tasks": len(tasks)})
    return tasks


def admit_tasks(cp: CoreState, tasks: list[Job], limit: int | None) -> None:
    """The first ``limit`` tasks go to the engine; the rest are held."""
    hold = Hold(limit or len(tasks), [j.id for j in tasks])
    for i, job in enumerate(tasks):
        if limit is None or i < limit:
            cp.snap.add_pending(cp.workload(job))
        else:
            hold.held.append(job.id)
    if hold.held:
        cp.array_holds[tasks[0].id] = hold


def throttled(cp: CoreState) -> Throttled:
    """The throttled arrays with held tasks, as ``fairpod.server.accounting.eta.held_starts`` needs them (the lock is held:
    the estimates ask through ``Core.throttled_arrays``). The held tasks are read in one query and looked up in a set: one read and a list scan per held task made a 10,000-task array's
    refresh hold the lock for tens of seconds, and every request and turn waited."""
    out: Throttled = []
    running, pending = cp.snap.running, cp.snap.pending
    for h in cp.array_holds.values():
        held = set(h.held)
        jobs = cp.store.get_jobs([j for j in h.held if to_engine(j) not in running and to_engine(j) not in pending])
        tasks = []
        for jid in h.tasks:
            w = running.get(to_engine(jid)) or pending.get(to_engine(jid))
            if w is None and jid in held:
                job = jobs.get(jid)
                w = cp.workload(job) if job is not None and job.state == JobState.PENDING else None
            if w is not None:
                tasks.append((jid, w, jid in held))
        out.append((h.limit, tasks))
    return out
