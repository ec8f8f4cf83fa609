"""What a snapshot kept across cycles remembers (a team check that failed on the team's own quota or borrow limit,
the teams with jobs queued, each queue's first job per shape) changes no decision: every cycle decides as a fresh
engine on a copy of the same snapshot with all of that forgotten."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairpod.governance.decisions import Admit, Wait

from .helpers import T, cycle, make, submit, usage
from .test_properties import clusters, events


def _forgetful(snap):
    """A copy of ``snap`` with nothing carried over from earlier cycles: the engine then computes everything anew."""
    fresh = copy.deepcopy(snap)
    fresh.quota_blocked.clear()
    fresh.memo.clear()
    fresh.waiting = {name: t for name, t in fresh.teams.items() if t.queue}
    for t in fresh.teams.values():
        t.queue.tops = None
    return fresh


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), events, st.booleans())
def test_a_snapshot_kept_across_cycles_decides_as_a_fresh_one(cluster, evs, whole_nodes):
    nodes, teams, policy = cluster
    snap = make(nodes, teams, **policy)
    for t in teams:
        if t["budget"] is not None:
            snap.teams[t["name"]].budget[T] = (100.0 * t["budget"][0], 100.0, t["budget"][1])
    now = 0.0
    for i, ev in enumerate(evs * 2):  # the same events again: more cycles over queues that wait
        now += 1
        if ev[0] == "submit":
            _, ti, acc, n, prio, expected, user = ev
            team = teams[ti % len(teams)]["name"]
            w = submit(snap, f"j{i}", team, 4 if whole_nodes else acc, n=n, t=now, prio=prio, user=user)
            w.expected = expected
        elif snap.running:
            snap.finish(sorted(snap.running)[ev[1] % len(snap.running)])
        fresh = _forgetful(snap)
        kept = cycle(snap, now)
        assert repr(kept) == repr(cycle(fresh, now)), f"cycle {i}"
        assert set(snap.waiting) == {name for name, t in snap.teams.items() if t.queue}


def test_a_job_over_its_teams_borrow_limit_starts_once_its_team_uses_less():
    """The remembered failure holds only while the team's usage is what it was: one of the team's own jobs ending
    is enough for the waiting job to start, in that cycle, with no other change in the cluster."""
    snap = make(4, [{"name": "a", "quota": 4, "limit": 100}, {"name": "b", "quota": 12}])
    submit(snap, "a1", "a", 4, t=0)
    submit(snap, "a2", "a", 4, t=0)
    assert {d.job for d in cycle(snap, 1) if isinstance(d, Admit)} == {"a1", "a2"}  # a2 borrows: 8 = the limit
    submit(snap, "a3", "a", 4, t=2)
    ds = cycle(snap, 2)
    assert [d.reason for d in ds if isinstance(d, Wait) and d.job == "a3"][0].startswith("borrow limit reached")
    for t in (3, 4, 5):  # nothing changes: it keeps waiting, with no new decision
        assert cycle(snap, t) == []
    snap.finish("a1")
    assert usage(snap, "a") == 4
    assert [d.job for d in cycle(snap, 6) if isinstance(d, Admit)] == ["a3"]
