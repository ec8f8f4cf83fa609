"""Rule 10: budgets over time (fairpod.governance.budget).

  10.1 past 80 % of its budget a team's jobs count as the lowest priority against other teams' jobs;
  10.2 past 100 % the team may not borrow (its own quota it still uses);
  10.3 past 100 % with a hard cap none of its jobs on that type starts; running ones go on;
  10.4 a budgeted team past 80 % gives its borrowed jobs first as victims among equal candidates;
  10.5 the meter counts accelerator-seconds per period (UTC day, ISO week, month) and starts each period at 0.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fairpod.governance.budget import Meter, period_start

from .helpers import T, admitted, cycle, make, preempted, submit, waits


def _budget(snap, team: str, used: float, hours: float = 100.0, hard: bool = False) -> None:
    snap.teams[team].budget[T] = (used, hours, hard)


@pytest.mark.parametrize("used, first", [(0.0, "a-hi"), (79.0, "a-hi"), (80.0, "b-lo")])
def test_10_1_past_80_percent_lowest_priority(used, first):
    # one idle node lent by c; a and b both want to borrow it, a's job has the higher priority
    snap = make(3, [{"name": "a", "quota": 4, "weight": 50}, {"name": "b", "quota": 4, "weight": 50},
                    {"name": "c", "quota": 4, "strategy": "Lend"}], task_prioritization="TaskRanking",
                idle_compute_allocation="FirstComeFirstServe")
    submit(snap, "a-own", "a", 4, t=0.0, prio=90)
    submit(snap, "b-own", "b", 4, t=0.0, prio=90)
    cycle(snap, 0.0)
    _budget(snap, "a", used)
    submit(snap, "a-hi", "a", 4, t=1.0, prio=90)
    submit(snap, "b-lo", "b", 4, t=1.0, prio=10)
    assert admitted(cycle(snap, 2.0)) == [first]


@pytest.mark.parametrize("used, own, borrowed", [(99.9, True, True), (100.0, True, False), (150.0, True, False)])
def test_10_2_past_100_percent_no_borrowing(used, own, borrowed):
    snap = make(2, [{"name": "a", "quota": 4}, {"name": "c", "quota": 4, "strategy": "Lend"}])
    _budget(snap, "a", used)
    submit(snap, "own", "a", 4, t=0.0)
    submit(snap, "more", "a", 4, t=0.0)
    ds = cycle(snap, 1.0)
    assert ("own" in admitted(ds), "more" in admitted(ds)) == (own, borrowed)
    if not borrowed:
        assert waits(ds)["more"] == f"budget spent: team a used {used:.1f} of its 100 {T} accelerator-hours " \
                                    "this period, so it may not borrow"


def test_10_3_hard_cap_holds_new_jobs_not_running_ones():
    snap = make(2, [{"name": "a", "quota": 8}])
    submit(snap, "running", "a", 4, t=0.0)
    cycle(snap, 0.0)
    _budget(snap, "a", 100.0, hard=True)
    submit(snap, "new", "a", 4, t=1.0)
    ds = cycle(snap, 2.0)
    assert admitted(ds) == [] and "running" in snap.running
    assert waits(ds)["new"].startswith("budget hard cap: team a used 100.0 of its 100")
    _budget(snap, "a", 0.0, hard=True)  # the next period
    assert admitted(cycle(snap, 3.0)) == ["new"]


@pytest.mark.parametrize("a_used, victim", [(None, "b-borrow"), (79.0, "b-borrow"), (85.0, "a-borrow")])
def test_10_4_team_past_80_percent_is_reclaimed_first(a_used, victim):
    # a and b each borrow one node of c's; c reclaims one: b's (started later) goes, unless a is past 80 %
    snap = make(4, [{"name": "a", "quota": 4}, {"name": "b", "quota": 4},
                    {"name": "c", "quota": 8, "strategy": "Lend"}])
    for name in ("a-own", "a-borrow"):
        submit(snap, name, "a", 4, t=0.0)
    cycle(snap, 0.0)
    for name in ("b-own", "b-borrow"):
        submit(snap, name, "b", 4, t=1.0)
    cycle(snap, 1.0)
    if a_used is not None:
        _budget(snap, "a", a_used)
    submit(snap, "c-own", "c", 4, t=2.0)
    ds = cycle(snap, 3.0)
    assert admitted(ds) == ["c-own"] and preempted(ds) == [victim]


@pytest.mark.parametrize("period, t, start", [
    ("day", datetime(2026, 11, 25, 13, 5, tzinfo=UTC), datetime(2026, 11, 25, tzinfo=UTC)),
    ("week", datetime(2026, 11, 25, 13, 5, tzinfo=UTC), datetime(2026, 11, 23, tzinfo=UTC)),  # a Wednesday
    ("week", datetime(2026, 11, 23, 0, 0, tzinfo=UTC), datetime(2026, 11, 23, tzinfo=UTC)),
    ("month", datetime(2026, 12, 31, 23, 59, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)),
])
def test_10_5_periods(period, t, start):
    assert period_start(period, t.timestamp()) == start.timestamp()


def test_10_5_meter_counts_and_rolls_over():
    snap = make(2, [{"name": "a", "quota": 8}])
    day0 = datetime(2026, 11, 23, tzinfo=UTC).timestamp()
    m = Meter({("a", T): ("day", 10.0, False)})
    assert m.unseen(day0 + 60) == [(("a", T), day0)]
    m.accrue(snap.teams, day0 + 3600)
    assert m.unseen(day0 + 60) == []
    submit(snap, "j", "a", 4, n=2, t=day0 + 3600)
    cycle(snap, day0 + 3600)  # 8 accelerators from 01:00
    m.accrue(snap.teams, day0 + 2 * 3600)
    assert snap.teams["a"].budget[T] == (8.0, 10.0, False)
    m.accrue(snap.teams, day0 + 86400 + 1800)  # past midnight: the new day counts from 00:00 only
    assert snap.teams["a"].budget[T] == (4.0, 10.0, False)
    # after a restart: the period's hours up to now from elsewhere, then counting from now on
    m2 = Meter({("a", T): ("day", 10.0, False)})
    m2.seed(("a", T), day0 + 86400, 9 * 3600.0, at=day0 + 86400 + 1800)
    m2.accrue(snap.teams, day0 + 86400 + 3600)
    assert snap.teams["a"].budget[T] == (13.0, 10.0, False)
