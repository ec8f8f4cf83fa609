"""Rule 3b: a reclaim that would destroy much work waits a while for room to free by itself
(policy.preemption_cost_wait_seconds). Nine nodes of 4 accelerators: a (quota 32) runs 24 (3/4 of it); b's
12-accelerator job borrows a's idle 8, then a wants them back."""

from __future__ import annotations

import math

import pytest

from .helpers import admitted, cycle, make, preempted, submit, waits

W = 900.0  # the policy's default


def borrowed(ran: float, a_runs: int = 6, **policy: float):
    """a runs ``a_runs`` nodes; b1 (3 nodes x 4) borrows 8 of a's quota and runs ``ran`` seconds."""
    snap = make(9, [{"name": "a", "quota": 32}, {"name": "b", "quota": 4, "limit": 200}], **policy)
    if a_runs:
        submit(snap, "a0", "a", 4, n=a_runs, t=0.0)
    submit(snap, "b1", "b", 4, n=3, t=0.0)
    assert sorted(admitted(cycle(snap, 0.0))) == (["a0", "b1"] if a_runs else ["b1"])
    snap.now = ran
    return snap


def test_a_reclaim_that_would_destroy_much_waits_then_goes() -> None:
    # b1 would lose 12 x 4,000 = 48,000 accelerator-seconds >= 2 x 900 x 4: a1 waits up to 900 s for room
    snap = borrowed(4000.0)
    submit(snap, "a1", "a", 4, t=4000.0)
    ds = cycle(snap, 4000.0)
    assert preempted(ds) == [] and admitted(ds) == []
    reason = waits(ds)["a1"]
    assert reason.startswith("waiting for reclaim: the borrowed jobs it would stop would lose 13.3 accelerator-hours")
    assert "up to 15 min" in reason and "preemption_cost_wait_seconds" in reason
    assert snap.retry_at == 4000.0 + W  # when it may go ahead (a simulator wakes the engine then)
    ds = cycle(snap, 4000.0 + W - 1)  # starving by now: the guard holds nodes for it, the reclaim still waits
    assert preempted(ds) == [] and admitted(ds) == [] and snap.pending["a1"].reason == reason
    ds = cycle(snap, 4000.0 + W)  # it has waited the policy's time: the work is stopped after all
    assert preempted(ds) == ["b1"] and admitted(ds) == ["a1"]
    assert snap.retry_at == math.inf and not snap.cost_held


def test_room_that_frees_by_itself_ends_the_wait_without_a_preemption() -> None:
    snap = borrowed(4000.0)
    submit(snap, "a1", "a", 4, t=4000.0)
    assert preempted(cycle(snap, 4000.0)) == []
    snap.finish("b1")  # b1 ends on its own 5 minutes later: nothing is lost
    ds = cycle(snap, 4300.0)
    assert admitted(ds) == ["a1"] and preempted(ds) == []


@pytest.mark.parametrize("ran, submitted, n, a_runs, policy", [
    pytest.param(500.0, 500.0, 1, 6, {}, id="it destroys little: 12 x 500 < 2 x 900 x 4"),
    pytest.param(4000.0, 4000.0 - W, 1, 6, {}, id="the job has been in the queue 15 min already"),
    pytest.param(40000.0, 40000.0, 1, 6, {"preemption_cost_wait_seconds": 0}, id="off"),
    pytest.param(1000.0, 1000.0, 2, 6, {}, id="per accelerator: 12 x 1,000 < 2 x 900 x 8"),
    pytest.param(4000.0, 4000.0, 4, 3, {}, id="a runs 12 of 32, less than half: it lends most of it"),
])
def test_a_reclaim_goes_at_once(ran: float, submitted: float, n: int, a_runs: int, policy: dict) -> None:
    snap = borrowed(ran, a_runs=a_runs, **policy)
    submit(snap, "a1", "a", 4, n=n, t=submitted)
    ds = cycle(snap, ran)
    assert preempted(ds) == ["b1"] and admitted(ds) == ["a1"]


def test_where_an_8_accelerator_job_reclaims_at_once_a_4_accelerator_one_waits() -> None:
    snap = borrowed(1000.0)  # 12 x 1,000 >= 2 x 900 x 4
    submit(snap, "a1", "a", 4, t=1000.0)
    assert preempted(cycle(snap, 1000.0)) == [] and "a1" in snap.cost_held


def test_the_forecast_starts_a_held_job_when_its_wait_is_over() -> None:
    from fairpod.governance.forecast import estimate_starts

    snap = borrowed(4000.0)  # b1's end is unknown: only the end of a1's wait lets it start
    submit(snap, "a1", "a", 4, t=4000.0)
    assert estimate_starts(snap) == {"a1": 4000.0 + W}
