"""Transactions: all or nothing, read-only transactions, and many threads on one Store."""

from __future__ import annotations

import threading

import pytest

from fairpod.model.jobs import JobState
from fairpod.model.spec import ClusterSpec
from fairpod.store import AlreadyExists, Store, StoreError

from .helpers import submit


def _counts(store: Store) -> tuple[int, int, int, int]:
    return (len(store.list_jobs()), len(store.list_events(limit=None)), len(store.list_nodes()),
            len(store.list_audit(limit=None)))  # fmt: skip


def test_failure_half_way_leaves_nothing(store: Store, cluster: ClusterSpec):
    before = _counts(store)
    with pytest.raises(RuntimeError), store.tx() as t:
        job = submit(t, cluster, "a")
        t.append_event("JobSubmitted", job_id=job.id, team="john")
        t.add_node("w-0", "workers", "ml.g5.12xlarge")
        t.append_audit("alice", "job.submit", "john/a")
        t.put_spec(cluster)
        raise RuntimeError("crash in the middle")
    assert _counts(store) == before
    assert store.get_spec() is None
    # the seq counter rolled back too: the next job is seq 1
    assert submit(store, cluster, "b").seq == 1


def test_store_error_inside_tx_rolls_back_earlier_writes(store: Store, cluster: ClusterSpec):
    job = submit(store, cluster, "a")
    with pytest.raises(AlreadyExists), store.tx() as t:
        t.update_job(job.id, {"state": JobState.RUNNING, "reason": "go"})
        t.append_event("JobAdmitted", job_id=job.id)
        submit(t, cluster, "a")  # clashes with the unfinished job a
    assert store.get_job(job.id) == job
    assert store.list_events() == []
    with pytest.raises(ValueError), store.tx() as t:
        t.update_job(job.id, {"reason": "first change is fine"})
        t.update_job(job.id, {"attempt": "not an int"})
    assert store.get_job(job.id) == job


def test_tx_commits_and_sees_its_own_writes(store: Store, cluster: ClusterSpec):
    with store.tx() as t:
        job = submit(t, cluster, "a")
        t.update_job(job.id, {"state": JobState.RUNNING}, expect_state=JobState.PENDING)
        t.append_event("JobAdmitted", job_id=job.id)
        got = t.get_job(job.id)
        assert got is not None and got.state is JobState.RUNNING
    got = store.get_job(job.id)
    assert got is not None and got.state is JobState.RUNNING
    assert [e.kind for e in store.list_events(job_id=job.id)] == ["JobAdmitted"]
    with pytest.raises(StoreError):
        t.get_job(job.id)  # the Tx is over


def test_read_only_tx(store: Store, cluster: ClusterSpec):
    submit(store, cluster, "a")
    with store.tx(write=False) as t:
        assert len(t.list_jobs()) == 1
        with pytest.raises(StoreError):
            t.append_event("X")


def test_threads_write_and_stream_concurrently(store: Store, cluster: ClusterSpec):
    """4 writer threads (each job + its event in one tx) and a reader following the event feed."""
    n_threads, per_thread = 4, 15
    errors: list[BaseException] = []
    seen: list[int] = []
    done = threading.Event()

    def writer(k: int) -> None:
        try:
            for i in range(per_thread):
                with store.tx() as t:
                    job = submit(t, cluster, f"t{k}-{i}", team="john" if k % 2 else "smith")
                    t.append_event("JobSubmitted", job_id=job.id, team=job.team)
                store.update_job(job.id, {"state": JobState.RUNNING})
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def reader() -> None:
        last = 0
        try:
            while True:
                finished = done.is_set()
                for e in store.list_events(since_id=last):
                    assert e.id > last
                    seen.append(e.id)
                    last = e.id
                if finished:
                    return
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(n_threads)]
    rt = threading.Thread(target=reader)
    rt.start()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    done.set()
    rt.join()
    assert errors == []
    jobs = store.list_jobs()
    assert len(jobs) == n_threads * per_thread
    assert sorted(j.seq for j in jobs) == list(range(1, n_threads * per_thread + 1))
    assert all(j.state is JobState.RUNNING for j in jobs)
    assert seen == [e.id for e in store.list_events(limit=None)]
    assert len(seen) == n_threads * per_thread
