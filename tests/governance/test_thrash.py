"""Rule 7's protection against preemption thrash: a job preempted ``PROTECTED_AFTER`` times goes after every other
victim candidate, and, when it fits its team's quota, runs only within it (it no longer borrows)."""

from __future__ import annotations

from fairpod.governance.ordering import PROTECTED_AFTER

from .helpers import admitted, cycle, make, preempted, submit, waits


def test_a_job_preempted_often_waits_for_its_own_quota_instead_of_borrowing():
    snap = make(4, [{"name": "l", "quota": 8}, {"name": "b", "quota": 4, "limit": 100}])
    submit(snap, "b1", "b", 4, t=0)
    submit(snap, "b2", "b", 4, t=0).preemptions = PROTECTED_AFTER
    submit(snap, "b3", "b", 2, t=0)
    ds = cycle(snap, 0)
    assert admitted(ds) == ["b1", "b3"]
    assert f"preempted {PROTECTED_AFTER} times, the job no longer runs on borrowed capacity" in waits(ds)["b2"]
    snap.finish("b1")
    snap.finish("b3")
    ds = cycle(snap, 5)
    assert admitted(ds) == ["b2"]  # within b's quota again


def test_a_job_preempted_fewer_than_five_times_still_borrows_idle_capacity():
    # protecting after 3 preemptions left idle capacity behind jobs that could have borrowed it (the contended
    # ITP replay, docs/simulator.md): a job is protected after 5
    snap = make(4, [{"name": "l", "quota": 8}, {"name": "b", "quota": 4, "limit": 100}])
    submit(snap, "b1", "b", 4, t=0)
    submit(snap, "b2", "b", 4, t=0).preemptions = 4
    assert admitted(cycle(snap, 0)) == ["b1", "b2"]


def test_a_job_that_needs_more_than_its_quota_still_borrows_when_protected():
    snap = make(4, [{"name": "l", "quota": 8}, {"name": "b", "quota": 4, "limit": 100}])
    submit(snap, "b8", "b", 4, n=2, t=0).preemptions = PROTECTED_AFTER
    assert admitted(cycle(snap, 0)) == ["b8"]


def test_reclaim_takes_a_teams_other_borrowed_job_before_a_protected_one():
    snap = make(4, [{"name": "l", "quota": 12}, {"name": "b", "quota": 4, "limit": 100}])
    submit(snap, "l1", "l", 4, t=0)
    submit(snap, "b-x", "b", 4, t=0)
    submit(snap, "b-y", "b", 4, t=0)
    assert admitted(cycle(snap, 0)) == ["l1", "b-x", "b-y"]
    snap.running["b-x"].preemptions = PROTECTED_AFTER
    snap.running["b-x"].checkpoint = 9  # it would lose 1 s, b-y 10 s: without the protection b-x goes
    submit(snap, "l2", "l", 4, n=2, t=10)
    ds = cycle(snap, 10)
    assert preempted(ds) == ["b-y"] and admitted(ds) == ["l2"]
