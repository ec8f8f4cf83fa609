"""Rule 9: per-user limits inside a team (see fairpod.governance.users).

  9.1 a user's running jobs hold at most the team's max_running_accelerators; the rest of that user's jobs
      wait with the reason, other users' jobs of the same shape still start;
  9.2 a job larger than the cap never starts and does not hold the team up;
  9.3 RoundRobin: the next job comes from the user who runs the fewest accelerators (ties: the user served
      longest ago, then queue order);
  9.4 FirstComeFirstServe (default): the team's queue order, whoever submitted;
  9.5 a capped job is no starving job: the starvation guard holds nothing for it;
  9.6 a job over its user's cap starts in place of that user's own lower-priority jobs (rule 7), never of
      another user's, and in the same cycle as the cap is reached (nothing left for a later cycle to undo).
"""

from __future__ import annotations

import pytest

from .helpers import admitted, cycle, make, preempted, submit, usage, waits


@pytest.mark.parametrize("cap, ann_runs", [(None, 8), (4, 4), (6, 6), (8, 8)])
def test_9_1_cap_per_user(cap, ann_runs):
    snap = make(4, [{"name": "a", "quota": 16, "user_cap": cap}])
    for i in range(8):
        submit(snap, f"ann{i}", "a", 1, t=1.0 + i, user="ann")
    submit(snap, "bob0", "a", 1, t=20.0, user="bob")  # same shape, submitted last
    ds = cycle(snap, 30.0)
    ann = [j for j in admitted(ds) if j.startswith("ann")]
    assert len(ann) == ann_runs
    assert "bob0" in admitted(ds)
    assert snap.teams["a"].user_acc == {"ann": ann_runs, "bob": 1}
    if cap is not None and cap < 8:
        reason = waits(ds)[f"ann{ann_runs}"]
        assert reason == f"per-user cap: user ann runs {ann_runs} accelerators in team a, the job needs 1 more " \
                         f"and the cap is {cap}"
        snap.finish("ann0")  # room under the cap again: the user's next job starts
        assert admitted(cycle(snap, 31.0)) == [f"ann{ann_runs}"]


def test_9_2_job_larger_than_cap_never_starts():
    snap = make(4, [{"name": "a", "quota": 16, "user_cap": 4}])
    submit(snap, "huge", "a", 4, n=2, t=1.0, user="ann")
    submit(snap, "small", "a", 4, t=2.0, user="ann")
    ds = cycle(snap, 3.0)
    assert admitted(ds) == ["small"]
    assert "more than team a's per-user cap of 4: it can never start" in waits(ds)["huge"]


@pytest.mark.parametrize("order, expect", [
    ("RoundRobin", ["ann0", "bob0", "cy0", "ann1", "bob1", "cy1"]),
    ("FirstComeFirstServe", ["ann0", "ann1", "ann2", "ann3", "bob0", "cy0"]),
])
def test_9_3_and_9_4_queue_order_across_users(order, expect):
    # one node of 4 accelerators shared by 1-accelerator jobs: admitted one by one as jobs finish
    snap = make(2, [{"name": "a", "quota": 8, "round_robin": order == "RoundRobin"}])
    t = 0.0
    for i in range(4):
        t += 1
        submit(snap, f"ann{i}", "a", 4, t=t, user="ann")  # ann's burst first
    for i in range(2):
        t += 1
        submit(snap, f"bob{i}", "a", 4, t=t, user="bob")
        t += 1
        submit(snap, f"cy{i}", "a", 4, t=t, user="cy")
    started: list[str] = []
    now = 100.0
    started += admitted(cycle(snap, now))
    while len(started) < 6:
        now += 1
        snap.finish(started[len(started) - 2])  # the older of the two running ends
        started += admitted(cycle(snap, now))
    assert started == expect


def test_9_5_capped_job_holds_no_capacity():
    # the guard starts at once (0 s): ann's waiting job is over her cap, so nothing is held for it and
    # bob's later job takes the free node
    snap = make(2, [{"name": "a", "quota": 8, "user_cap": 4}], starvation_guard_seconds=0)
    submit(snap, "ann0", "a", 4, t=1.0, user="ann")
    assert admitted(cycle(snap, 1.0)) == ["ann0"]
    submit(snap, "ann1", "a", 4, t=2.0, user="ann")
    submit(snap, "bob0", "a", 4, t=3.0, user="bob")
    ds = cycle(snap, 10.0)
    assert admitted(ds) == ["bob0"]
    assert usage(snap, "a") == 8
    assert "per-user cap" in snap.pending["ann1"].reason


@pytest.mark.parametrize("preempt, stops", [("LowerPriority", 1), ("Never", 0)])
def test_9_6_capped_job_starts_in_place_of_its_users_lower_priority_job(preempt, stops):
    snap = make(2, [{"name": "a", "quota": 8, "user_cap": 4, "preempt": preempt}], task_prioritization="TaskRanking")
    for i in range(4):
        submit(snap, f"ann{i}", "a", 1, t=1.0 + i, user="ann")
        submit(snap, f"bob{i}", "a", 1, t=1.5 + i, user="bob")
    assert len(admitted(cycle(snap, 10.0))) == 8
    submit(snap, "ann-urgent", "a", 1, t=11.0, prio=90, user="ann")
    ds = cycle(snap, 12.0)
    victims = preempted(ds)
    assert len(victims) == stops and all(v.startswith("ann") for v in victims)  # never one of bob's jobs
    if stops:
        assert admitted(ds) == ["ann-urgent"]
        assert snap.teams["a"].user_acc == {"ann": 4, "bob": 4}
    else:
        assert waits(ds)["ann-urgent"].startswith("per-user cap: user ann runs 4 accelerators")
    assert not preempted(cycle(snap, 12.5))  # stable: nothing left for the next cycle


def test_9_6_a_freed_cap_is_used_in_the_cycle_that_frees_it():
    # found by the property test: bob's urgent job stopped one of ann's, after which ann's urgent job, capped
    # until then, preempted another of hers in the next cycle; now it does so at once
    snap = make(1, [{"name": "a", "quota": 4, "user_cap": 4}], task_prioritization="TaskRanking")
    for i in range(4):
        submit(snap, f"ann{i}", "a", 1, t=1.0 + i, user="ann")
    cycle(snap, 5.0)
    submit(snap, "ann-urgent", "a", 1, t=6.0, prio=10, user="ann")
    ds = cycle(snap, 6.0)
    assert admitted(ds) == ["ann-urgent"] and len(preempted(ds)) == 1
    submit(snap, "bob-urgent", "a", 1, t=7.0, prio=10, user="bob")
    ds = cycle(snap, 7.0)
    assert admitted(ds) == ["bob-urgent"] and len(preempted(ds)) == 1
    assert not preempted(cycle(snap, 7.5))
