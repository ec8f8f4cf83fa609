"""Group commit of submits: submits that wait for the lock together are written in one transaction, each
answers only once its rows are committed, a taken name fails only its own submit, and a failed write fails
the submits it covered and leaves the memory as the store is. In-process (``inproc``: real SQLite, the timed
executor, a FAKE clock); the test holds the control plane's lock so that submits queue behind it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from fairpod.model.jobs import JobSpec, JobState
from fairpod.server.errors import InvalidJob, JobExists, NeverFits
from fairpod.store import StoreError

from ..inproc import InProc


def queued(h: InProc, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run ``calls`` in threads while the test holds the lock, each started once the one before it is queued (their
    arrival order is theirs: started all at once, a loaded machine once queued the third after the eighth); let
    it go once all of them wait for it. Returns what each returned or raised, in order."""
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            out[i] = calls[i]()
        except Exception as e:  # noqa: BLE001 - the test looks at it
            out[i] = e

    with h.cp.lock:
        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(calls))]
        deadline = time.monotonic() + 10
        for i, t in enumerate(threads):
            t.start()
            while len(h.cp.submits) <= i and time.monotonic() < deadline:
                time.sleep(0.01)
        assert len(h.cp.submits) == len(calls)  # every submit validated and waits for the lock
        assert all(o is None for o in out)  # none has answered before its write
    for t in threads:
        t.join(timeout=10)
    return out


def spec(name: str, team: str = "john", seconds: int = 60) -> JobSpec:
    return JobSpec(name=name, team=team, command=["sleep", str(seconds)])


def test_submits_that_wait_together_are_one_transaction(h: InProc) -> None:
    commits = h.cp.submits.commits
    out = queued(h, [lambda i=i: h.cp.submit(spec(f"j{i}"), "tester") for i in range(6)])
    assert [j.name for j in out] == [f"j{i}" for i in range(6)]
    assert h.cp.submits.commits == commits + 1  # one transaction for the six
    stored = {j.name: j for j in h.store.list_jobs()}
    for j in out:
        assert stored[j.name].id == j.id and stored[j.name].state == JobState.PENDING
        assert str(j.id) in h.cp.snap.pending  # the engine's queue has each
        assert [e.kind for e in h.events(j)] == ["JobSubmitted"]
    h.turn()
    assert sum(h.job(f"j{i}").state == JobState.RUNNING for i in range(6)) >= 1


def test_a_groups_statements_do_not_grow_with_its_submits(h: InProc) -> None:
    """A group's jobs, their events and their audit entries are written one statement each, and its jobs' ``seq``s
    with one counter bump, whatever the group's size (no name read before each insert: the unique index says),
    in SQLite's one write lock; every row as one submit alone writes it."""
    from sqlalchemy import event

    said: list[str] = []

    def count(conn: Any, cur: Any, sql: str, *_: Any) -> None:  # INSERT <table>, UPDATE <table>, SELECT, BEGIN
        w = sql.split()
        said.append(f"INSERT {w[2]}" if w[0] == "INSERT" else f"UPDATE {w[1]}" if w[0] == "UPDATE" else w[0])

    h.submit("alone", "john")
    alone = h.job("alone")
    event.listen(h.store.engine, "before_cursor_execute", count)
    try:
        out = queued(h, [lambda i=i: h.cp.submit(spec(f"g{i}"), "tester") for i in range(8)])
    finally:
        event.remove(h.store.engine, "before_cursor_execute", count)
    assert [j.name for j in out] == [f"g{i}" for i in range(8)]
    writes = sorted(s for s in said if s.split()[0] in ("INSERT", "UPDATE"))
    assert writes == ["INSERT audit", "INSERT events", "INSERT jobs", "UPDATE counters"], said
    assert not [s for s in said if s.startswith("SELECT")], said
    assert [j.seq for j in out] == list(range(alone.seq + 1, alone.seq + 9))  # consecutive, in arrival order
    for j in out:
        stored = h.store.get_job(j.id)
        assert stored == j  # the answer is the row stored
        assert [e.kind for e in h.events(j)] == ["JobSubmitted"]
    skip = {"id", "name", "spec", "seq", "submit_time", "enqueued_at", "updated_at", "incarnation"}
    assert {k: v for k, v in asdict(out[0]).items() if k not in skip} == {  # the row as one submit alone writes it
        k: v for k, v in asdict(alone).items() if k not in skip}
    assert out[0].spec.model_dump() == {**alone.spec.model_dump(), "name": "g0"}
    audit = h.store.list_audit(action="job.submit")[1:]  # after the one of "alone"
    assert [(e.target, e.detail) for e in audit] == [(f"john/{j.name}", {"id": j.id}) for j in out]


def test_a_keyed_groups_statements_do_not_grow_with_its_submits(h: InProc) -> None:
    """Submits with an Idempotency-Key (the CLI sends one with each): the group's keys are looked up in one
    statement, the jobs of the ones used before read in one, and the new ones recorded in one; a key used before
    answers its job, a key new to the group creates one."""
    from sqlalchemy import event

    said: list[str] = []

    def count(conn: Any, cur: Any, sql: str, *_: Any) -> None:
        w = sql.split()
        said.append(f"INSERT {w[2]}" if w[0] == "INSERT" else f"UPDATE {w[1]}" if w[0] == "UPDATE" else w[0])

    before = [h.cp.submit(spec(f"old{i}"), "tester", f"old-{i}") for i in range(2)]
    event.listen(h.store.engine, "before_cursor_execute", count)
    try:
        out = queued(h, [lambda i=i: h.cp.submit(spec(f"g{i}"), "tester", f"new-{i}") for i in range(6)]
                     + [lambda i=i: h.cp.submit(spec(f"again{i}"), "tester", f"old-{i}") for i in range(2)])
    finally:
        event.remove(h.store.engine, "before_cursor_execute", count)
    assert [j.name for j in out] == [f"g{i}" for i in range(6)] + ["old0", "old1"]
    assert [j.id for j in out[6:]] == [j.id for j in before]  # the replays: the jobs their keys made
    writes = sorted(s for s in said if s.split()[0] in ("INSERT", "UPDATE"))
    assert writes == ["INSERT audit", "INSERT events", "INSERT jobs", "INSERT submit_keys", "UPDATE counters"], said
    assert said.count("SELECT") == 2, said  # the keys, then the jobs of the two used before
    for i, j in enumerate(out[:6]):  # each new key answers its job again
        assert h.cp.submit(spec(f"g{i}"), "tester", f"new-{i}").id == j.id
    assert sorted(j.name for j in h.store.list_jobs()) == sorted(["old0", "old1"] + [f"g{i}" for i in range(6)])


def test_a_taken_name_fails_only_its_own_submit(h: InProc) -> None:
    h.submit("dup", "john")
    out = queued(h, [lambda: h.cp.submit(spec("a"), "tester"), lambda: h.cp.submit(spec("dup"), "tester"),
                     lambda: h.cp.submit(spec("b"), "tester")])
    assert out[0].name == "a" and out[2].name == "b"
    assert isinstance(out[1], JobExists)
    assert sorted(j.name for j in h.store.list_jobs()) == ["a", "b", "dup"]
    assert set(h.cp.snap.pending) == {str(j.id) for j in h.store.list_jobs()}


def test_the_same_name_twice_in_one_group_is_written_once(h: InProc) -> None:
    out = queued(h, [lambda: h.cp.submit(spec("x"), "tester"), lambda: h.cp.submit(spec("x"), "tester")])
    assert sum(isinstance(o, JobExists) for o in out) == 1
    assert [j.name for j in h.store.list_jobs()] == ["x"]
    assert list(h.cp.snap.pending) == [str(h.job("x").id)]


def test_a_repeated_idempotency_key_in_one_group_returns_the_first_job(h: InProc) -> None:
    out = queued(h, [lambda: h.cp.submit(spec("k"), "tester", "key-1"),
                     lambda: h.cp.submit(spec("k"), "tester", "key-1")])
    assert out[0].id == out[1].id
    assert len(h.store.list_jobs()) == 1 and list(h.cp.snap.pending) == [str(out[0].id)]


def test_an_invalid_job_in_a_group_fails_alone(h: InProc) -> None:
    out = queued(h, [lambda: h.cp.submit(spec("ok"), "tester"),
                     lambda: h.cp.submit(JobSpec(name="bad", team="john", command=[]), "tester")])
    assert out[0].name == "ok" and isinstance(out[1], InvalidJob)
    assert [j.name for j in h.store.list_jobs()] == ["ok"]


def test_a_failed_write_fails_the_group_and_the_memory_stays_the_stores(h: InProc,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    h.submit("before", "john")
    real_tx = h.store.tx

    def broken_tx(*a: Any, **kw: Any) -> Any:
        raise StoreError("disk full (injected)")

    monkeypatch.setattr(h.store, "tx", broken_tx)
    out = queued(h, [lambda i=i: h.cp.submit(spec(f"f{i}"), "tester") for i in range(4)])
    assert all(isinstance(o, StoreError) for o in out)
    monkeypatch.setattr(h.store, "tx", real_tx)
    assert [j.name for j in h.store.list_jobs()] == ["before"]
    assert list(h.cp.snap.pending) == [str(h.job("before").id)]
    assert h.cp.submit(spec("after"), "tester").name == "after"  # the next submit writes as before
    assert {j.name for j in h.store.list_jobs()} == {"before", "after"}


# -- the tests once in test_joining_nodes.py (merged here):
# A job is judged against the cluster's declared capacity as well as the nodes present now: on Ray, nodes join
# one by one after the control plane starts, and a job submitted meanwhile must queue, not be refused. (In-process
# ControlPlane, real SQLite store, the timed executor, a FAKE clock: tests/server/inproc.py.)
T = "ml.g5.12xlarge"


def test_a_job_for_nodes_still_joining_queues_and_one_past_the_declared_capacity_is_refused(tmp_path: Path):
    h = InProc(tmp_path)  # the seed cluster: 4 nodes of ml.g5.12xlarge declared
    try:
        for name in sorted(h.cp.snap.nodes)[1:]:  # only one of them has joined so far
            h.cp.snap.remove_node(name)
        assert len(h.cp.snap.by_type[T]) == 1
        job = h.cp.submit(JobSpec(name="pair", team="john", nodes=2, command=["sleep", "1"]), "tester")
        assert job.state.value == "Pending"
        with pytest.raises(NeverFits, match="the job asks for 5 ml.g5.12xlarge nodes; the cluster has 4"):
            h.cp.submit(JobSpec(name="five", team="john", nodes=5, command=["sleep", "1"]), "tester")
    finally:
        h.close()
