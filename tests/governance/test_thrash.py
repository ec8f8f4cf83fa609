"""Rule 7's protection against preemption thrash: a job preempted ``PROTECTED_AFTER`` times goes after every other
victim candidate, and, when it fits its team's quota, starts only while the team's protected jobs, it included,
fit within that quota (then a reclaim, which takes the team's other jobs first and stops once the team is back
within its quota, does not reach it). A protected job that waits holds up none of its team's other jobs."""

from __future__ import annotations

from fairpod.governance.ordering import PROTECTED_AFTER

from .helpers import admitted, cycle, make, preempted, submit, waits


def test_a_protected_job_borrows_while_its_teams_protected_jobs_fit_its_quota_and_reclaim_passes_it_by():
    # before: b2 waited for room within b's quota (b1 filled it) while l's lent nodes stood idle
    snap = make(4, [{"name": "l", "quota": 8}, {"name": "b", "quota": 4, "limit": 100}])
    submit(snap, "b1", "b", 4, t=0)
    submit(snap, "b2", "b", 4, t=0, preemptions=PROTECTED_AFTER)
    assert admitted(cycle(snap, 0)) == ["b1", "b2"]  # b2 borrows: b's protected jobs (b2 alone) fit its quota
    submit(snap, "l1", "l", 4, t=100)
    submit(snap, "l2", "l", 4, t=100)
    ds = cycle(snap, 100)
    # b1 loses more work than b2 would (both started at 0), yet it goes: b is back within its quota without b2
    assert admitted(ds) == ["l1", "l2"] and preempted(ds) == ["b1"]
    assert "b2" in snap.running


def test_a_protected_job_waits_while_its_teams_protected_jobs_fill_its_quota_without_holding_up_the_team():
    snap = make(4, [{"name": "l", "quota": 8}, {"name": "b", "quota": 4, "limit": 100}])
    submit(snap, "b1", "b", 4, t=0, preemptions=PROTECTED_AFTER)
    assert admitted(cycle(snap, 0)) == ["b1"]
    submit(snap, "b2", "b", 4, t=1, preemptions=PROTECTED_AFTER)
    submit(snap, "b3", "b", 4, t=2)  # the same size, not protected: it may borrow (before: it waited behind b2)
    ds = cycle(snap, 5)
    assert admitted(ds) == ["b3"]
    assert (f"preempted {PROTECTED_AFTER} times, the job runs only while the team's protected jobs fit within its "
            "quota") in waits(ds)["b2"]
    snap.finish("b1")
    assert admitted(cycle(snap, 10)) == ["b2"]  # b's protected jobs fit its quota again


def test_a_starving_protected_job_does_not_hold_up_its_teams_other_jobs():
    # the starvation guard (600 s) holds a team's other jobs only if they could delay its starving job: an
    # unprotected job does not take the room a protected one waits for (before: b3 waited "behind job b2")
    snap = make(4, [{"name": "l", "quota": 8}, {"name": "b", "quota": 4, "limit": 100}])
    submit(snap, "b1", "b", 4, t=0, preemptions=PROTECTED_AFTER)
    assert admitted(cycle(snap, 0)) == ["b1"]
    submit(snap, "b2", "b", 4, t=1, preemptions=PROTECTED_AFTER)
    submit(snap, "b3", "b", 2, t=2)
    ds = cycle(snap, 1000)
    assert admitted(ds) == ["b3"] and "b2" in waits(ds)


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
