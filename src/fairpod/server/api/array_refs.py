"""Job references, the one resolver of what a user typed to name a job: its id or name (``find_job``), and job
arrays as fairpod shows them, as in Slurm: the array's name or its id (``14``) address the whole array; ``14_5``
(``fairpod.model.keys.task_ref``) and ``NAME-5`` address one task.

``resolve`` answers (the job, the array's tasks or None): for a whole array the job is its first task and the
tasks are all of them, in task order; ``one_task`` refuses a whole array.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairpod.model.keys import TASK_REF, task_ref
from fairpod.server.api.limits import MAX_ID
from fairpod.server.arrays import array_of, array_view
from fairpod.server.errors import Problem
from fairpod.store import Job

if TYPE_CHECKING:
    from fairpod.server.access.auth import Principal
    from fairpod.server.core.api import Core



def _tasks(cp: Core, first: Job) -> list[Job]:
    tasks = cp.queries.same_array(first) or [first]
    return sorted(tasks, key=lambda j: (array_view(j) or {}).get("task_id", 0))


def _by_id(cp: Core, text: str) -> Job | None:
    return cp.queries.get_job(int(text)) if int(text) <= MAX_ID else None


def _array_named(cp: Core, teams: list[str], name: str) -> list[Job]:
    """The first task of the newest array called ``name`` in each of ``teams`` that has one."""
    newest: dict[str, Job] = {}
    for j in cp.queries.array_firsts_named(teams, name + "-"):
        if (array_view(j) or {}).get("name") == name and (j.team not in newest or j.id > newest[j.team].id):
            newest[j.team] = j
    return [newest[t] for t in dict.fromkeys(teams) if t in newest]


def find_job(cp: Core, p: Principal, ref: str, team: str | None) -> Job:
    """A job by id or by name (the team's unfinished job of that name, else its latest), as ``p`` may see it."""
    job: Job | None = None
    if ref.isascii() and ref.isdigit():
        job = cp.queries.get_job(int(ref)) if len(ref) <= 19 and int(ref) <= MAX_ID else None
    else:
        teams = [team] if team else (p.visible_teams() or [t.name for t in cp.spec.teams])
        found = cp.queries.jobs_named(teams, ref)
        if len(found) > 1:
            names = ", ".join(j.team for j in found)
            raise Problem(409, "ambiguous job name", f"teams {names} each have a job {ref!r}; give --team")
        job = found[0] if found else None
    if job is None or not p.sees_team(job.team):
        raise Problem(404, "no such job", f"no job {ref!r} that you can see")
    return job


def resolve(cp: Core, p: Principal, ref: str, team: str | None) -> tuple[Job, list[Job] | None]:
    """``(job, tasks)`` for ``ref``; ``tasks`` is the whole array when ``ref`` names one. Anything that is not an
    array address is a plain job (:func:`find_job`)."""
    m = TASK_REF.fullmatch(ref)
    if m is not None:
        first = _by_id(cp, m.group(1))
        if first is None or not p.sees_team(first.team):
            raise Problem(404, "no such job", f"no job array {m.group(1)} that you can see")
        arr = array_of(first)
        if arr is None or arr[0] != first.id:
            raise Problem(404, "no such job", f"job {m.group(1)} is not a job array")
        hit = [j for j in _tasks(cp, first) if (array_view(j) or {}).get("task_id") == int(m.group(2))]
        if not hit:
            raise Problem(404, "no such job", f"job array {m.group(1)} has no task {m.group(2)}")
        return hit[0], None
    try:
        job = find_job(cp, p, ref, team)
    except Problem as e:
        if e.status != 404 or ref.isdigit():
            raise
        teams = [team] if team else (p.visible_teams() or [t.name for t in cp.spec.teams])
        firsts = [j for j in _array_named(cp, teams, ref) if p.sees_team(j.team)]
        if len(firsts) > 1:
            names = ", ".join(j.team for j in firsts)
            raise Problem(409, "ambiguous job name", f"teams {names} each have a job array {ref!r}; give --team"
                          ) from None
        if not firsts:
            raise
        return firsts[0], _tasks(cp, firsts[0])
    arr = array_of(job)
    if ref.isdigit() and arr is not None and arr[0] == job.id:
        return job, _tasks(cp, job)
    return job, None


def one_task(cp: Core, p: Principal, ref: str, team: str | None) -> Job:
    """The one job ``ref`` names (a task by ``ID_T`` too); an array's name alone is refused with the way to
    name one of its tasks (its id alone stays its first task, as before)."""
    job, tasks = resolve(cp, p, ref, team)
    if tasks is not None and not ref.isdigit():
        first = array_view(tasks[0]) or {}
        raise Problem(409, "job array", f"{ref!r} is a job array of {len(tasks)} tasks: name one, e.g. "
                      f"{tasks[0].name} or {task_ref(first.get('job_id', tasks[0].id), first.get('task_id', 0))}")
    return job
