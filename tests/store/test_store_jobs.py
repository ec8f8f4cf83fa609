"""Jobs: insert, lookups, list filters and ordering, partial updates, counts, name uniqueness."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fairpod.model.jobs import JobSpec, JobState, resolve_job
from fairpod.model.spec import ClusterSpec
from fairpod.store import AlreadyExists, Conflict, NotFound, Store

from .helpers import submit


def test_insert_and_get_round_trip(store: Store, cluster: ClusterSpec):
    spec = JobSpec(name="train", team="smith", priority="training", nodes=2, accelerators=2,
                   command=["python", "t.py"], env={"A": "1"}, auto_resume=True, max_retry=3)  # fmt: skip
    res = resolve_job(spec, cluster)
    job = store.insert_job(spec, res, submit_time=100.0, now=101.0)
    assert job.id > 0 and job.seq == 1
    assert (job.name, job.team, job.spec) == ("train", "smith", spec)
    assert (job.state, job.reason, job.priority) == (JobState.PENDING, "", 50)
    assert (job.instance_type, job.nodes, (job.acc, job.mcpu, job.mib)) == (
        "ml.g5.12xlarge",
        2,
        res.per_replica,
    )
    assert (job.submit_time, job.enqueued_at, job.updated_at) == (100.0, 100.0, 101.0)
    assert (job.attempt, job.max_retry, job.auto_resume, job.preemptions) == (0, 3, True, 0)
    assert (job.placement, job.borrowed_from, job.run_state) == ([], {}, None)
    assert store.get_job(job.id) == job
    assert store.get_job(12345) is None
    assert store.get_job_by_name("smith", "train") == job
    assert store.get_job_by_name("john", "train") is None


def test_update_every_field_kind(store: Store, cluster: ClusterSpec):
    job = submit(store, cluster, "a")
    changes = {
        "state": JobState.RUNNING, "reason": "admitted", "started_at": 5.0, "first_started_at": 5,
        "attempt": 1, "placement": ["w-2", "w-0"], "borrowed_from": {"smith": 4},
        "run_state": {"code": 0, "signal": None}, "checkpoint_at": 9.5, "checkpoint_step": 1200,
        "checkpoint_path": "/ckpt/a/1200", "master_port": 29500, "preemptions": 2, "priority": 100,
    }  # fmt: skip
    new = store.update_job(job.id, changes, now=50.0)
    assert new.state is JobState.RUNNING and new.placement == ["w-2", "w-0"]
    assert (new.first_started_at, new.borrowed_from, new.run_state) == (
        5.0,
        {"smith": 4},
        {"code": 0, "signal": None},
    )
    assert (new.checkpoint_step, new.checkpoint_path, new.master_port, new.updated_at) == (
        1200,
        "/ckpt/a/1200",
        29500,
        50.0,
    )
    assert store.get_job(job.id) == new
    # everything not changed is as before
    keep = {k for k in (f.name for f in dataclasses.fields(job)) if k not in changes and k != "updated_at"}
    assert all(getattr(new, k) == getattr(job, k) for k in keep)
    # back to None
    assert store.update_job(job.id, {"run_state": None, "master_port": None}).run_state is None


def test_update_rejects_bad_input_and_changes_nothing(store: Store, cluster: ClusterSpec):
    job = submit(store, cluster, "a")
    bad: list[dict[str, Any]] = [
        {"state": "Running", "name": "b"},  # name is read-only
        {"state": "Running", "id": 5},
        {"state": "Exploded"},
        {"reason": "x", "attempt": "1"},
        {"reason": "x", "auto_resume": 1},
        {"reason": "x", "placement": "w-0"},
        {"reason": "x", "borrowed_from": {"t": object()}},
        {"reason": "x", "spec": {"name": "other", "team": "john"}},
        {"reason": "x", "spec": {"name": "a"}},  # not a valid JobSpec
    ]
    for changes in bad:
        with pytest.raises(ValueError):
            store.update_job(job.id, changes)
    assert store.get_job(job.id) == job
    with pytest.raises(NotFound):
        store.update_job(999, {"reason": "x"})


def test_expect_state_is_compare_and_set(store: Store, cluster: ClusterSpec):
    job = submit(store, cluster, "a")
    store.update_job(job.id, {"state": JobState.RUNNING}, expect_state=JobState.PENDING)
    with pytest.raises(Conflict):
        store.update_job(
            job.id, {"state": JobState.RUNNING, "reason": "again"}, expect_state=JobState.PENDING
        )
    got = store.get_job(job.id)
    assert got is not None and got.reason == ""
    store.update_job(job.id, {"state": "Cancelled"}, expect_state=[JobState.PENDING, JobState.RUNNING])


def test_name_unique_among_unfinished_jobs(store: Store, cluster: ClusterSpec):
    a1 = submit(store, cluster, "a")
    with pytest.raises(AlreadyExists):
        submit(store, cluster, "a")
    submit(store, cluster, "a", team="smith")  # other team, fine
    store.update_job(a1.id, {"state": JobState.SUCCEEDED, "finished_at": 9.0})
    a2 = submit(store, cluster, "a")  # the name is free again
    assert a2.id != a1.id and a2.seq > a1.seq
    got = store.get_job_by_name("john", "a")
    assert got is not None and got.id == a2.id
    with pytest.raises(AlreadyExists):  # reviving a1 would clash with a2
        store.update_job(a1.id, {"state": JobState.PENDING})
    assert store.get_job(a1.id).state is JobState.SUCCEEDED  # type: ignore[union-attr]
    store.update_job(a2.id, {"state": JobState.FAILED})
    got = store.get_job_by_name("john", "a")
    assert got is not None and got.id == a2.id  # newest finished one
    assert len(store.list_jobs(team="john", name="a")) == 2


def test_list_filters_and_order(store: Store, cluster: ClusterSpec):
    jobs = [submit(store, cluster, f"j{i}", team="john" if i % 2 else "smith") for i in range(10)]
    assert [j.seq for j in jobs] == list(range(1, 11))
    store.update_job(jobs[3].id, {"state": JobState.RUNNING})
    store.update_job(jobs[4].id, {"state": JobState.RUNNING})
    store.update_job(jobs[5].id, {"state": JobState.FAILED})
    ids = [j.id for j in jobs]

    assert [j.id for j in store.list_jobs()] == ids
    assert [j.id for j in store.list_jobs(descending=True)] == ids[::-1]
    assert [j.id for j in store.list_jobs(team="john")] == ids[1::2]
    assert [j.id for j in store.list_jobs(team=["john", "smith"])] == ids
    assert [j.id for j in store.list_jobs(team=[])] == []
    assert [j.id for j in store.list_jobs(state=JobState.RUNNING)] == [ids[3], ids[4]]
    assert [j.id for j in store.list_jobs(state=[JobState.RUNNING, JobState.FAILED])] == ids[3:6]
    assert [j.id for j in store.list_jobs(state="Running", team="john")] == [ids[3]]
    assert [j.id for j in store.list_jobs(finished=True)] == [ids[5]]
    assert len(store.list_jobs(finished=False)) == 9
    assert [j.id for j in store.list_jobs(limit=3)] == ids[:3]
    assert [j.id for j in store.list_jobs(limit=3, offset=8)] == ids[8:]
    assert [j.id for j in store.list_jobs(limit=2, offset=1, descending=True)] == [ids[8], ids[7]]
    assert [j.id for j in store.list_jobs(instance_type="ml.g5.12xlarge", name="j7")] == [ids[7]]

    # seq, not id, sets the order
    store.update_job(ids[0], {"seq": 1000})
    assert [j.id for j in store.list_jobs()] == ids[1:] + ids[:1]

    counts = store.count_jobs_by_state()
    assert counts == {JobState.PENDING: 7, JobState.RUNNING: 2, JobState.PREEMPTED: 0, JobState.SUCCEEDED: 0,
                      JobState.FAILED: 1, JobState.CANCELLED: 0}  # fmt: skip
    assert store.count_jobs_by_state(team="john")[JobState.RUNNING] == 1
    assert sum(store.count_jobs_by_state(team=["nobody"]).values()) == 0


def test_seq_survives_reopen(db_url: str, cluster: ClusterSpec):
    a = Store(db_url)
    a.create_all()
    submit(a, cluster, "x")
    submit(a, cluster, "y")
    a.close()
    b = Store(db_url)
    b.create_all()
    assert submit(b, cluster, "z").seq == 3
