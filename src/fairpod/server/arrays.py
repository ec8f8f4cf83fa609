"""Job arrays as the API shows them: which array a task belongs to, its tasks, its index. One request submits
every task (``NAME-INDEX``); the throttle that lets at most N run at a time is the control plane's
(:mod:`fairpod.server.core.transitions.array_holds`)."""

from __future__ import annotations

from typing import Any

from fairpod.store.records import EngineJob, Job


def array_of(job: Job | EngineJob) -> tuple[int, int | None] | None:
    """(array job id, limit) of an array task (the store's ``array_id``, ``array_limit``); None for other jobs."""
    return None if job.array_id is None else (job.array_id, job.array_limit)


def same_array(store: Any, first: Job) -> list[Job] | None:
    """Every task of the array whose first task is ``first`` (None if ``first`` is no array task)."""
    arr = array_of(first)
    if arr is None:
        return None
    return store.array_tasks(arr[0])


def array_view(job: Job) -> dict[str, Any] | None:
    """What the API shows of a task's array: its id, its base name, the task's index."""
    if job.array_id is None:
        return None
    env = job.spec.env
    try:
        return {"job_id": job.array_id, "task_id": int(env["FAIRPOD_ARRAY_TASK_ID"]),
                "name": env.get("FAIRPOD_ARRAY_NAME", job.name), "count": int(env["FAIRPOD_ARRAY_TASK_COUNT"]),
                "limit": job.array_limit}
    except (KeyError, ValueError):
        return None
