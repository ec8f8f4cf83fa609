"""The estimated start of pending jobs: the engine run forward on a copy of the state (governance.forecast)."""

from __future__ import annotations

import math

import pytest

from fairpod.governance import Workload
from fairpod.governance.forecast import estimate_starts
from tests.governance.helpers import T, make, per


def _state(nodes: int, teams: list[dict], running: list[tuple], pending: list[tuple], now: float):
    """running: (id, team, acc, started, expected, min_runtime, prio); pending: (id, team, acc, expected, prio)."""
    snap = make(nodes, teams, task_prioritization="TaskRanking")
    for i, (jid, team, acc, started, expected, min_rt, prio) in enumerate(running):
        w = Workload(jid, team, T, 1, per(acc), priority=prio, submit=started, seq=i + 1, expected=expected,
                     min_runtime=min_rt)
        snap.add_pending(w)
        snap.now = started
        snap.start(w, [sorted(snap.nodes)[i % nodes]], started)
    for jid, team, acc, expected, prio in pending:
        snap.add_pending(Workload(jid, team, T, 1, per(acc), priority=prio, submit=0.0, expected=expected))
    snap.now = now
    return snap


A = [{"name": "a", "quota": 4}]
AB = [{"name": "a", "quota": 4, "weight": 10}, {"name": "b", "quota": 4, "weight": 10}]

CASES = [
    # name, nodes, teams, running, pending, now, expected estimates
    ("fits now", 1, A, [], [("p", "a", 4, None, -1)], 5.0, {"p": 5.0}),
    ("one after another, by declared durations", 1, A, [("r", "a", 4, 0.0, 100.0, 0.0, -1)],
     [("p1", "a", 4, 50.0, -1), ("p2", "a", 4, 30.0, -1), ("p3", "a", 4, None, -1), ("p4", "a", 4, 10.0, -1)],
     10.0, {"p1": 100.0, "p2": 150.0, "p3": 180.0, "p4": None}),
    ("small jobs share the node as it frees", 1, A, [("r1", "a", 2, 0.0, 40.0, 0.0, -1),
                                                   ("r2", "a", 2, 0.0, 60.0, 0.0, -1)],
     [("p1", "a", 2, 100.0, -1), ("p2", "a", 2, 100.0, -1), ("p3", "a", 4, 5.0, -1)],
     0.0, {"p1": 40.0, "p2": 60.0, "p3": 160.0}),
    ("a run past its expected end ends now", 1, A, [("r", "a", 4, 0.0, 5.0, 0.0, -1)],
     [("p", "a", 4, None, -1)], 10.0, {"p": 10.0}),
    ("unknown end: no estimate", 1, A, [("r", "a", 4, 0.0, None, 0.0, -1)], [("p", "a", 4, 10.0, -1)],
     10.0, {"p": None}),
    ("priority preemption once min_runtime is over", 1, A, [("r", "a", 4, 0.0, 1000.0, 50.0, 10)],
     [("p", "a", 4, 10.0, 90)], 10.0, {"p": 50.0}),
    # b reclaims its quota at once; a's victim r2 is back first in a's queue, restarts when b1 ends (30) and
    # runs its 300 s again; a1 follows it
    ("another team's quota comes back by reclaim", 2, AB, [("r1", "a", 4, 0.0, 500.0, 0.0, -1),
                                                          ("r2", "a", 4, 0.0, 300.0, 0.0, -1)],
     [("b1", "b", 4, 20.0, -1), ("a1", "a", 4, 20.0, -1)], 10.0, {"b1": 10.0, "a1": 330.0}),
]


@pytest.mark.parametrize(("nodes", "teams", "running", "pending", "now", "want"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_estimated_starts(nodes, teams, running, pending, now, want):
    snap = _state(nodes, teams, running, pending, now)
    assert estimate_starts(snap) == want


def test_the_snapshot_is_not_changed():
    snap = _state(1, A, [("r", "a", 4, 0.0, 100.0, 0.0, -1)], [("p1", "a", 4, 50.0, -1), ("p2", "a", 4, 5.0, -1)],
                  10.0)
    before = (snap.now, sorted(snap.running), sorted(snap.pending), [n.free[:] for n in snap.nodes.values()])
    assert estimate_starts(snap) == {"p1": 100.0, "p2": 150.0}
    assert (snap.now, sorted(snap.running), sorted(snap.pending), [n.free[:] for n in snap.nodes.values()]) == before
    assert snap.running["r"].expected == 100.0 and snap.pending["p1"].started is None


def test_typical_durations_fill_in_for_jobs_that_declare_none():
    snap = _state(1, A, [("r", "a", 4, 0.0, None, 0.0, -1)], [("p1", "a", 4, None, -1), ("p2", "a", 4, None, -1)],
                  10.0)
    typical = {"r": 200.0, "p1": 30.0}
    assert estimate_starts(snap, durations=lambda w: typical.get(w.id)) == {"p1": 200.0, "p2": 230.0}
    assert estimate_starts(snap) == {"p1": None, "p2": None}
    assert snap.running["r"].expected is None  # only the forecast used it, the engine was not told


def test_bounds_on_horizon_and_cycles():
    running = [("r", "a", 4, 0.0, 100.0, 0.0, -1)]
    pending = [("p1", "a", 4, 1000.0, -1), ("p2", "a", 4, 5.0, -1)]
    snap = _state(1, A, running, pending, 10.0)
    assert estimate_starts(snap, horizon=500.0) == {"p1": 100.0, "p2": None}  # p2 at 1100: beyond 10 + 500
    assert estimate_starts(snap, max_cycles=1) == {"p1": None, "p2": None}
    assert estimate_starts(snap, max_cycles=2) == {"p1": 100.0, "p2": None}


def test_every_pending_job_of_a_long_queue_gets_an_estimate():
    pending = [(f"p{i:03d}", "a", 1, 10.0 * (i % 7 + 1), -1) for i in range(200)]
    snap = _state(2, A, [], pending, 0.0)
    est = estimate_starts(snap)
    assert all(v is not None and math.isfinite(v) for v in est.values())
    # FCFS within the team and a quota of 4 accelerators: four at a time, in submission order
    order = sorted(est, key=lambda j: (est[j], j))
    assert order == sorted(est)
    assert sum(1 for v in est.values() if v == 0.0) == 4
