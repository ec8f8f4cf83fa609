"""Jobs by name across teams and by job array, each in one query (fairpod.store.lookups), against the per-team
lookup they replace (``get_job_by_name``) and the scan of every job (``list_jobs``)."""

from __future__ import annotations

from fairpod.model.jobs import JobSpec, JobState, resolve_job
from fairpod.model.spec import ClusterSpec
from fairpod.store import Job, Store

from .helpers import submit


def array(store: Store, cluster: ClusterSpec, name: str, team: str, n: int) -> list[Job]:
    """A job array as the server stores one: the first task, its id as the array's, then the rest at once."""
    spec = JobSpec(name=name, team=team)
    res = resolve_job(spec, cluster)
    first = store.insert_job(spec.model_copy(update={"name": f"{name}-0"}), res)
    first = store.update_job(first.id, {"array_id": first.id})
    rest = store.insert_tasks([spec.model_copy(update={"name": f"{name}-{i}"}) for i in range(1, n)], res,
                              ["queued"] * (n - 1), first.id, None)
    return [first, *rest]


def test_jobs_named_is_the_per_team_lookup_for_every_team_at_once(store: Store, cluster: ClusterSpec):
    old = submit(store, cluster, "train", team="john")
    store.update_job(old.id, {"state": JobState.SUCCEEDED, "finished_at": 1.0})
    new = submit(store, cluster, "train", team="john")  # john: a finished and an unfinished one
    gone = submit(store, cluster, "train", team="smith")
    store.update_job(gone.id, {"state": JobState.FAILED, "finished_at": 2.0})
    later = submit(store, cluster, "train", team="smith")
    store.update_job(later.id, {"state": JobState.CANCELLED, "finished_at": 3.0})  # smith: two finished ones
    submit(store, cluster, "other", team="john")
    teams = ["smith", "nobody", "john"]
    got = store.jobs_named(teams, "train")
    assert got == [j for t in teams if (j := store.get_job_by_name(t, "train")) is not None]
    assert [j.id for j in got] == [later.id, new.id]  # in the order asked; smith's newest, john's unfinished
    assert store.jobs_named(["john", "john"], "train") == [store.get_job(new.id)]
    assert store.jobs_named([], "train") == [] and store.jobs_named(teams, "none") == []


def test_an_arrays_tasks_and_first_tasks_by_name_prefix(store: Store, cluster: ClusterSpec):
    a = array(store, cluster, "sweep", "john", 3)
    for j in a:
        store.update_job(j.id, {"state": JobState.SUCCEEDED, "finished_at": 1.0})
    a = [store.get_job(j.id) for j in a]
    b = array(store, cluster, "sweep", "john", 2)  # the same name again
    c = array(store, cluster, "sweep", "smith", 2)
    array(store, cluster, "sweepx", "john", 2)  # another name with the same start
    submit(store, cluster, "sweep-9", team="john")  # a plain job named like a task
    assert store.array_tasks(a[0].id) == a and store.array_tasks(b[0].id) == b
    assert store.array_tasks(a[0].id) == [j for j in store.list_jobs(team="john") if j.array_id == a[0].id]
    assert [j.id for j in store.array_firsts_named(["john", "smith"], "sweep-")] == [a[0].id, b[0].id, c[0].id]
    assert [j.id for j in store.array_firsts_named(["smith"], "sweep-")] == [c[0].id]
    assert store.array_firsts_named(["john"], "s_eep-") == [] and store.array_firsts_named(["john"], "s%") == []
    assert store.array_firsts_named([], "sweep-") == []


def test_unfinished_teams(store: Store, cluster: ClusterSpec):
    assert store.unfinished_teams() == set()
    done = submit(store, cluster, "a", team="smith")
    store.update_job(done.id, {"state": JobState.SUCCEEDED, "finished_at": 1.0})
    assert store.unfinished_teams() == set()
    submit(store, cluster, "b", team="john")
    submit(store, cluster, "c", team="john")
    assert store.unfinished_teams() == {"john"} == {j.team for j in store.list_jobs(finished=False)}
