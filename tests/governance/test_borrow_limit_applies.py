"""Rule 3 with ``policy.borrow_limit_applies: WhileOthersWait``: a team's borrow limit binds only while another
team waits with a job it may run now; otherwise the team borrows all idle lendable capacity, and lenders still
reclaim it."""

from __future__ import annotations

import pytest

from .helpers import admitted, cycle, make, preempted, submit, usage, waits

TEAMS = [{"name": "l", "quota": 4, "strategy": "Lend"}, {"name": "b", "quota": 4, "limit": 100},
         {"name": "c", "quota": 8, "limit": 100}]


@pytest.mark.parametrize("applies, expect", [("Always", ["b1", "b2"]), ("WhileOthersWait", ["b1", "b2", "b3"])])
def test_borrow_limit_binds_only_while_others_wait(applies, expect):
    snap = make(4, TEAMS, borrow_limit_applies=applies)
    for j in ("b1", "b2", "b3"):
        submit(snap, j, "b", 4, t=0)
    ds = cycle(snap, 0)
    assert admitted(ds) == expect
    if applies == "Always":
        assert "borrow limit reached" in waits(ds)["b3"]


def test_another_teams_runnable_waiting_job_brings_the_limit_back():
    snap = make(4, TEAMS, borrow_limit_applies="WhileOthersWait")
    submit(snap, "b1", "b", 4, t=0)
    submit(snap, "b2", "b", 4, t=0)
    assert admitted(cycle(snap, 0)) == ["b1", "b2"]
    submit(snap, "c2", "c", 4, n=3, t=1)  # c may hold it (within its borrow limit) but 8 accelerators are free
    submit(snap, "b3", "b", 4, t=1)
    ds = cycle(snap, 1)
    assert admitted(ds) == [] and preempted(ds) == []
    assert "borrow limit reached" in waits(ds)["b3"]


def test_capacity_borrowed_past_the_limit_is_reclaimed_by_its_lender():
    snap = make(4, TEAMS, borrow_limit_applies="WhileOthersWait")
    for j in ("b1", "b2", "b3"):
        submit(snap, j, "b", 4, t=0)
    cycle(snap, 0)
    assert usage(snap, "b") == 12
    submit(snap, "c1", "c", 4, n=2, t=5)
    ds = cycle(snap, 5)
    assert admitted(ds) == ["c1"] and len(preempted(ds)) == 1 and usage(snap, "b") == 8


def test_a_job_larger_than_the_limit_on_its_own_still_never_runs():
    snap = make(4, TEAMS, borrow_limit_applies="WhileOthersWait")
    submit(snap, "b-big", "b", 4, n=3, t=0)  # 12 accelerators: more than b's quota 4 + 100 %
    ds = cycle(snap, 0)
    assert admitted(ds) == [] and "borrow limit reached" in waits(ds)["b-big"]
