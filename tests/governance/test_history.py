"""Rule 5b: decayed-usage fair share, ``idle_compute_allocation: FairShareHistory`` (fairpod.governance.history).

  5b.1 a team's history is the decayed mean of its borrowed share: half of it after one half-life;
  5b.2 a team that borrowed a lot yields idle capacity to one that did not (FairShare gives it to the
       earlier job), and gets its turn again once its history has decayed;
  5b.3 for fair share, borrowed jobs of the team with the larger history are preempted first (victim order
       rule 2; a lender's reclaim keeps its order);
  5b.4 the history does not open new fair-share preemptions: the shares now decide whether one is allowed;
  5b.5 dump/load keep the history exactly; bad data leaves it empty, never half read.
"""

from __future__ import annotations

import json
import math

import pytest

from fairpod.governance import history

from .helpers import T, admitted, cycle, make, preempted, submit

HALF = 3600.0


def _teams(a_weight: int = 50, b_weight: int = 50) -> list[dict]:
    return [{"name": "a", "quota": 4, "weight": a_weight}, {"name": "b", "quota": 4, "weight": b_weight},
            {"name": "c", "quota": 8, "strategy": "Lend"}]


def _policy(alloc: str) -> dict:
    # no starvation guard within these tests' spans: the order of admission is fair share's alone
    return {"idle_compute_allocation": alloc, "fair_share_half_life_seconds": HALF,
            "starvation_guard_seconds": 30 * 86400}


@pytest.mark.parametrize("elapsed, expect", [(HALF, 0.125), (2 * HALF, 0.1875), (0.0, 0.0)])
def test_5b1_history_is_the_decayed_mean_borrowed_share(elapsed, expect):
    snap = make(4, _teams(), **_policy("FairShareHistory"))
    submit(snap, "a-own", "a", 4, t=0.0)
    submit(snap, "a-borrow", "a", 4, t=0.0)  # borrows 4 of the 16 lendable: share 0.25
    assert sorted(admitted(cycle(snap, 0.0))) == ["a-borrow", "a-own"]
    cycle(snap, elapsed)
    assert snap.teams["a"].history.get(T, 0.0) == pytest.approx(expect)
    assert snap.teams["b"].history == {}


@pytest.mark.parametrize("alloc, later, winner", [
    ("FairShare", HALF, "a"),  # the earlier job wins a tie of shares
    ("FairShareHistory", HALF, "b"),  # a borrowed for a half-life: b goes first
    ("FairShareHistory", 40 * HALF, "a"),  # forty half-lives later a's history is forgotten
])
def test_5b2_past_borrower_yields(alloc, later, winner):
    snap = make(4, _teams(), **_policy(alloc))
    submit(snap, "a-own", "a", 4, t=0.0)
    submit(snap, "a-borrow", "a", 4, t=0.0)
    cycle(snap, 0.0)
    snap.finish("a-borrow")
    cycle(snap, HALF)  # a borrowed 4 for one half-life, then stopped
    submit(snap, "c-own", "c", 4, t=HALF + 1)  # c uses half of its quota: one idle node left to lend
    submit(snap, "b-own", "b", 4, t=HALF + 1)
    cycle(snap, HALF + 1)
    submit(snap, "a-again", "a", 4, t=HALF + 2)  # a asks first ...
    submit(snap, "b-borrow", "b", 4, t=HALF + 3)  # ... b a moment later
    ds = cycle(snap, HALF + later)
    assert admitted(ds) == [f"{winner}-{'again' if winner == 'a' else 'borrow'}"]


def _fair_share_preemption(alloc: str) -> list[str]:
    # a, b each run 4 of their own and borrow 4 (two jobs of 2), a since 0, b since one half-life later; d, at
    # its quota, wants to borrow 2: its share after equals a's and b's after losing a job, so fair share may
    # take one job of either (all checkpointed: nothing lost)
    snap = make(5, [{"name": "a", "quota": 4, "weight": 50}, {"name": "b", "quota": 4, "weight": 50},
                    {"name": "d", "quota": 4, "weight": 50}, {"name": "c", "quota": 8, "strategy": "Lend"}],
                **_policy(alloc))
    for name, acc in (("a-own", 4), ("a-b1", 2), ("a-b2", 2)):
        submit(snap, name, "a", acc, t=0.0)
    cycle(snap, 0.0)
    for team in ("b", "d"):
        for name, acc in ((f"{team}-own", 4), (f"{team}-b1", 2), (f"{team}-b2", 2)):
            if name != "d-b1" and name != "d-b2":
                submit(snap, name, team, acc, t=HALF)
    cycle(snap, HALF)
    for w in snap.running.values():
        w.checkpoint = HALF + 20
    submit(snap, "d-borrow", "d", 2, t=HALF + 10)
    ds = cycle(snap, HALF + 20)
    assert admitted(ds) == ["d-borrow"]
    return preempted(ds)


def test_5b3_victims_from_the_team_with_more_history_first():
    assert _fair_share_preemption("FairShareHistory") == ["a-b2"]


def test_5b3_without_history_the_later_started_job_goes_first():
    assert _fair_share_preemption("FairShare") in (["b-b1"], ["b-b2"])


def test_5b4_history_opens_no_preemption():
    # b has a large history, a none; a wants to borrow but b's share now equals a's after admission: under
    # FairShare no preemption (equal shares), and the history does not change that
    snap = make(3, [{"name": "a", "quota": 4, "weight": 50}, {"name": "b", "quota": 4, "weight": 50},
                    {"name": "c", "quota": 4, "strategy": "Lend"}], **_policy("FairShareHistory"))
    for name in ("b-own", "b-borrow"):
        submit(snap, name, "b", 4, t=0.0)
    cycle(snap, 0.0)
    cycle(snap, 10 * HALF)
    assert snap.teams["b"].history[T] > 0.3
    submit(snap, "a-own", "a", 4, t=10 * HALF)
    submit(snap, "a-borrow", "a", 4, t=10 * HALF)
    ds = cycle(snap, 20 * HALF)
    assert admitted(ds) == ["a-own"] and preempted(ds) == []


def test_5b5_dump_and_load():
    snap = make(4, _teams(), **_policy("FairShareHistory"))
    for name in ("a-own", "a-borrow"):
        submit(snap, name, "a", 4, t=0.0)
    cycle(snap, 0.0)
    cycle(snap, HALF)
    saved = json.loads(json.dumps(history.dump(snap)))
    fresh = make(4, _teams(), **_policy("FairShareHistory"))
    history.load(fresh, saved)
    assert fresh.teams["a"].history == snap.teams["a"].history and fresh.history_at == HALF
    assert fresh.history_rate == {"a": {T: 0.25}}
    # the rate recorded before the save goes on after the load: after one more half-life, 0.1875
    fresh.now = 2 * HALF
    history.advance(fresh)
    assert fresh.teams["a"].history[T] == pytest.approx(0.1875)
    for bad in ({"at": "x", "history": {"a": {T: 1}}}, {"history": {"a": {T: -1.0}}},
                {"history": {"a": {T: math.nan}}}, {"history": ["a"]}):
        other = make(4, _teams(), **_policy("FairShareHistory"))
        history.load(other, bad)
        assert other.teams["a"].history == {} and other.history_at is None
