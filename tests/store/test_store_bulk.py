"""The store's bulk operations used by the control plane's batched writes: get_jobs, update_jobs, append_events."""

from __future__ import annotations

import pytest

from fairpod.model.jobs import JobState
from fairpod.model.spec import ClusterSpec
from fairpod.store import AlreadyExists, NotFound, Store

from .helpers import submit


def test_get_jobs_reads_many_at_once(store: Store, cluster: ClusterSpec):
    jobs = [submit(store, cluster, f"j{i}") for i in range(5)]
    got = store.get_jobs([j.id for j in jobs] + [999])
    assert got == {j.id: j for j in jobs}
    assert store.get_jobs([]) == {}


def test_update_jobs_sets_fields_like_update_job(store: Store, cluster: ClusterSpec):
    a, b, c = (submit(store, cluster, n) for n in "abc")
    store.update_jobs({
        a.id: {"state": JobState.RUNNING, "placement": ["n1"], "started_at": 5.0, "run_state": {"x": [1]}},
        b.id: {"reason": "waiting"},
        c.id: {"state": "Running", "placement": ["n2"], "started_at": 6, "run_state": None},
    }, now=7.0)  # fmt: skip
    ga, gb, gc = store.get_job(a.id), store.get_job(b.id), store.get_job(c.id)
    assert ga is not None and gb is not None and gc is not None
    assert (ga.state, ga.placement, ga.started_at, ga.run_state, ga.updated_at) == (
        JobState.RUNNING, ["n1"], 5.0, {"x": [1]}, 7.0)  # fmt: skip
    assert (gb.state, gb.reason) == (JobState.PENDING, "waiting")
    assert (gc.state, gc.started_at, gc.run_state) == (JobState.RUNNING, 6.0, None)


def test_update_jobs_is_all_or_nothing(store: Store, cluster: ClusterSpec):
    a = submit(store, cluster, "a")
    with pytest.raises(NotFound):
        store.update_jobs({a.id: {"reason": "x"}, 999: {"reason": "y"}})
    assert store.get_job(a.id).reason == ""  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="job.state"):
        store.update_jobs({a.id: {"state": "Sleeping"}})
    with pytest.raises(ValueError, match="unknown"):
        store.update_jobs({a.id: {"name": "b"}})


def test_update_jobs_keeps_names_unique(store: Store, cluster: ClusterSpec):
    old = submit(store, cluster, "train")
    store.update_job(old.id, {"state": JobState.SUCCEEDED})
    submit(store, cluster, "train")
    with pytest.raises(AlreadyExists):
        store.update_jobs({old.id: {"state": JobState.PENDING}})


def test_insert_job_refuses_a_second_unfinished_name(store: Store, cluster: ClusterSpec):
    first = submit(store, cluster, "train")
    with pytest.raises(AlreadyExists):
        submit(store, cluster, "train")
    second = submit(store, cluster, "train", team="smith")
    assert second.seq == first.seq + 1


def test_append_events_in_order_and_checks_jobs(store: Store, cluster: ClusterSpec):
    j = submit(store, cluster, "a")
    store.append_events([
        {"kind": "A", "message": "one", "job_id": j.id, "team": "john", "data": {"k": 1}, "ts": 1.0},
        {"kind": "B", "node": "n1"},
    ])  # fmt: skip
    evs = store.list_events()
    assert [(e.kind, e.message, e.job_id, e.node, e.team, e.data) for e in evs] == [
        ("A", "one", j.id, None, "john", {"k": 1}), ("B", "", None, "n1", None, {})]  # fmt: skip
    assert evs[0].ts == 1.0 and evs[0].id < evs[1].id
    with pytest.raises(NotFound):
        store.append_events([{"kind": "C"}, {"kind": "D", "job_id": 999}])
    assert len(store.list_events()) == 2
    with pytest.raises(ValueError, match="kind"):
        store.append_events([{"kind": ""}])


def test_insert_tasks_stores_an_arrays_tasks_in_one_go(store: Store, cluster: ClusterSpec):
    from fairpod.model.jobs import JobSpec, resolve_job

    first = submit(store, cluster, "arr-0")
    specs = [JobSpec(name=f"arr-{i}", team="john", command=["true"]) for i in range(1, 4)]
    tasks = store.insert_tasks(specs, resolve_job(specs[0], cluster), ["queued", "queued", "held"], first.id, 2,
                               now=9.0)
    assert [t.name for t in tasks] == ["arr-1", "arr-2", "arr-3"]
    assert [t.seq for t in tasks] == [first.seq + 1, first.seq + 2, first.seq + 3]
    assert [t.reason for t in tasks] == ["queued", "queued", "held"]
    assert store.get_jobs(t.id for t in tasks) == {t.id: t for t in tasks}  # what it returned is what it stored
    assert {(t.array_id, t.array_limit, t.submit_time) for t in tasks} == {(first.id, 2, 9.0)}
    assert submit(store, cluster, "after").seq == first.seq + 4  # the counter moved past them

    taken = [JobSpec(name=n, team="john", command=["true"]) for n in ("new", "arr-2")]
    with pytest.raises(AlreadyExists, match="arr-2"):
        store.insert_tasks(taken, resolve_job(taken[0], cluster), ["queued"] * 2, first.id, None)
    assert store.get_job_by_name("john", "new") is None  # all or nothing


def test_an_arrays_tasks_are_one_insert_whatever_their_number(store: Store, cluster: ClusterSpec):
    """A job array of 300 tasks: one insert of the jobs (a statement per row before, to have the ids back in the
    rows' order on SQLite), ids matched to the tasks by their seq."""
    from sqlalchemy import event

    from fairpod.model.jobs import JobSpec, resolve_job

    first = submit(store, cluster, "big-0")
    specs = [JobSpec(name=f"big-{i}", team="john", command=["true"]) for i in range(1, 301)]
    inserts: list[str] = []
    event.listen(store.engine, "before_cursor_execute",
                 lambda _c, _cur, sql, *_: inserts.append(sql) if sql.startswith("INSERT INTO jobs") else None)
    tasks = store.insert_tasks(specs, resolve_job(specs[0], cluster), ["queued"] * 300, first.id, None)
    assert len(inserts) == 1
    assert [t.name for t in tasks] == [s.name for s in specs]
    assert {t.id: t.name for t in store.get_jobs(t.id for t in tasks).values()} == {t.id: t.name for t in tasks}
