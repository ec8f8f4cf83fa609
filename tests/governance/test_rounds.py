"""What a snapshot kept across cycles remembers (a team check that failed on the team's own quota or borrow limit,
the teams with jobs queued, each queue's first job per shape) changes no decision: every cycle decides as a fresh
engine on a copy of the same snapshot with all of that forgotten."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairpod.governance.decisions import Admit, Wait

from .helpers import cycle, make, submit, usage
from .test_properties import apply, clusters, events, snapshot_of


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
    snap, teams = snapshot_of(cluster)
    now = 0.0
    for i, ev in enumerate(evs * 2):  # the same events again: more cycles over queues that wait
        now += 1
        apply(snap, teams, ev, f"j{i}", now, whole_nodes)
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


def test_a_job_left_unranked_as_known_to_fail_is_tried_after_a_preemption_takes_from_its_team():
    """In one round, team a's job a3 is known to fail on a's borrow limit, so the round does not rank it; b's job
    before it in the round's order preempts one of a's jobs for fair share, and a3, whose turn comes after, then
    fits a's limit and starts in that round, as in a fresh engine."""
    snap = make(4, [{"name": "a", "quota": 4, "limit": 200, "weight": 1}, {"name": "b", "quota": 4, "weight": 1},
                    {"name": "lender", "quota": 8, "weight": 1}], idle_compute_allocation="FairShare")
    for jid, team, acc in (("a1", "a", 4), ("a2", "a", 4), ("a4", "a", 4), ("bx", "b", 3)):
        submit(snap, jid, team, acc, t=0)
    cycle(snap, 0)
    assert (usage(snap, "a"), usage(snap, "b")) == (12, 3)  # a at its limit (4 + 200 %)
    submit(snap, "a3", "a", 1, t=1)
    assert [d.reason for d in cycle(snap, 1)][0].startswith("borrow limit reached")
    submit(snap, "b1", "b", 4, t=0)  # waited since 0: may take a job that lost little work for fair share
    for w in snap.running.values():
        w.checkpoint = 199.5
    fresh = _forgetful(snap)
    ds = cycle(snap, 200)
    assert repr(ds) == repr(cycle(fresh, 200))
    assert [type(d).__name__ for d in ds if not isinstance(d, Wait)] == ["Preempt", "Admit", "Admit"]
    assert {d.job for d in ds if isinstance(d, Admit)} == {"b1", "a3"}
