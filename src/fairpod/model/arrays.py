"""Job arrays: Slurm's ``--array`` index expressions (``0-199%16``, ``1,3,5``, ``0-99:2``)."""

from __future__ import annotations

import re

MAX_TASKS = 10_000  # tasks of one array
MAX_INDEX = 4_000_000
_PART = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")


class ArrayError(ValueError):
    """An array expression that cannot be run; the message says why."""


def parse_array(text: str) -> tuple[list[int], int | None]:
    """The sorted task indices of ``text`` and the number of tasks that may run at a time (None: all)."""
    expr, pct, lim = text.strip().partition("%")
    limit: int | None = None
    if pct:
        if not lim.isdigit() or int(lim) < 1:
            raise ArrayError(f"array {text!r}: %N needs a whole number of tasks at a time, at least 1")
        limit = int(lim)
    indices: set[int] = set()
    for part in expr.split(","):
        m = _PART.fullmatch(part.strip())
        if not m:
            raise ArrayError(f"array {text!r}: {part!r} is not INDEX, FIRST-LAST or FIRST-LAST:STEP")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first or step < 1:
            raise ArrayError(f"array {text!r}: {part!r} runs backwards or has a step below 1")
        if last > MAX_INDEX:
            raise ArrayError(f"array {text!r}: indices go up to {MAX_INDEX}")
        if (last - first) // step + 1 + len(indices) > MAX_TASKS:
            raise ArrayError(f"array {text!r}: more than {MAX_TASKS} tasks")
        indices.update(range(first, last + 1, step))
    return sorted(indices), limit


def task_env(array_id: int, name: str, index: int, indices: list[int], limit: int | None) -> dict[str, str]:
    """What a task's replicas get: fairpod's and Slurm's array variables."""
    env = {"FAIRPOD_ARRAY_JOB_ID": str(array_id), "FAIRPOD_ARRAY_TASK_ID": str(index),
           "FAIRPOD_ARRAY_TASK_COUNT": str(len(indices)), "FAIRPOD_ARRAY_TASK_MIN": str(indices[0]),
           "FAIRPOD_ARRAY_TASK_MAX": str(indices[-1]), "FAIRPOD_ARRAY_NAME": name,
           "SLURM_ARRAY_JOB_ID": str(array_id), "SLURM_ARRAY_TASK_ID": str(index),
           "SLURM_ARRAY_TASK_COUNT": str(len(indices)), "SLURM_ARRAY_TASK_MIN": str(indices[0]),
           "SLURM_ARRAY_TASK_MAX": str(indices[-1])}
    if limit is not None:
        env["FAIRPOD_ARRAY_TASK_LIMIT"] = str(limit)
    return env
