"""The forms in which a job is named outside its row of the store, each written and read here only: the job key
(the executor's name for a job: its run directory, its replicas' Ray names, ``FAIRPOD_JOB`` in a replica) and
Slurm's ``ID_T`` (task T of job array ID). A leaf module (``re`` only): the CLI and a replica's Slurm runner read
it without pydantic."""

from __future__ import annotations

import re

TASK_REF = re.compile(r"(\d{1,19})_(\d{1,9})")  # Slurm's ARRAYID_TASKID


def run_key(name: str, job_id: int) -> str:
    """The executor's name for a job (its run directory, its replicas' Ray names): unique, readable, safe as a
    directory name. :func:`job_id_of` reads it back."""
    return f"{name}-{job_id}"


def job_id_of(key: str) -> int | None:
    """The job id in a job key, None if it holds none."""
    try:
        return int(key.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return None


def task_ref(array_job_id: int | str, task_id: int | str) -> str:
    """``ID_T``: task ``task_id`` of job array ``array_job_id``, as Slurm writes it (``14_5``)."""
    return f"{array_job_id}_{task_id}"


def parse_task_ref(ref: str) -> tuple[int, int] | None:
    """(array job id, task id) of an ``ID_T``; None for any other reference."""
    m = TASK_REF.fullmatch(ref)
    return (int(m.group(1)), int(m.group(2))) if m else None
