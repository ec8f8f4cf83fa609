"""Retention in the store: what ``prune`` deletes and what it must keep."""

from __future__ import annotations

from fairpod.model.spec import ClusterSpec
from fairpod.store import Store
from fairpod.store.tables import SubmitKeyRow
from fairpod.store.usage import TEAM, UsageSample

from .helpers import submit


def finished(store: Store, cluster: ClusterSpec, name: str, at: float) -> int:
    job = submit(store, cluster, name, command=["true"])
    store.update_job(job.id, {"state": "Succeeded", "finished_at": at})
    store.append_event("JobSucceeded", f"{name} done", job_id=job.id, team="john", ts=at)
    return job.id


def test_prune_deletes_old_finished_jobs_events_and_samples_and_keeps_the_rest(store: Store, cluster: ClusterSpec):
    old = finished(store, cluster, "old", 100.0)
    recent = finished(store, cluster, "recent", 9_000.0)
    waiting = submit(store, cluster, "waiting-since-long-ago", command=["true"]).id  # unfinished: never deleted
    store.update_job(waiting, {"submit_time": 1.0})
    store.append_event("NodeRebooted", "node x", ts=50.0)
    store.append_event("NodeRebooted", "node y", ts=8_000.0)
    store.append_usage(60.0, [UsageSample(TEAM, "john", "t", acc=1)])
    store.append_usage(7_000.0, [UsageSample(TEAM, "john", "t", acc=2)])
    store.remember_submit("ann", "k-old", old)
    with store.tx() as t, t._session(True) as s:
        s.get(SubmitKeyRow, ("ann", "k-old")).created_at = 10.0  # type: ignore[union-attr]

    pruned = store.prune(5_000.0)

    assert pruned.jobs == ((old, "old"),) and not pruned.more
    assert (pruned.events, pruned.usage_rows, pruned.submit_keys) == (1, 1, 0)  # the key went with its job
    assert store.get_job(old) is None
    assert {j.id for j in store.list_jobs()} == {recent, waiting}
    assert sorted(e.message for e in store.list_events()) == ["node y", "recent done"]
    assert [r.acc for r in store.list_usage(0, 10**10)] == [2]
    assert store.submitted_with("ann", "k-old") is None
    assert store.prune(5_000.0).total == 0  # nothing left to delete


def test_prune_works_in_batches_oldest_first(store: Store, cluster: ClusterSpec):
    ids = [finished(store, cluster, f"j{i}", 100.0 + i) for i in range(5)]
    first = store.prune(1_000.0, limit=2)
    assert [i for i, _ in first.jobs] == ids[:2] and first.more
    second = store.prune(1_000.0, limit=2)
    assert [i for i, _ in second.jobs] == ids[2:4] and second.more
    last = store.prune(1_000.0, limit=2)
    assert last.jobs == ((ids[4], "j4"),) and not last.more
    assert store.list_jobs() == []
