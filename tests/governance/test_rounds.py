"""What a snapshot kept across cycles remembers (a team check that failed on the team's own quota or borrow limit,
the teams with jobs queued, each queue's first job per shape, each team's verdict that all its offers are known to
fail, each team's first runnable job) changes no decision: every cycle decides as a fresh engine on a copy of the
same snapshot with all of that forgotten; and what the rounds skip as known to fail would fail with no decision."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairpod.governance.decisions import Admit, Wait
from fairpod.governance.scheduler import _Cycle

from .helpers import cycle, make, submit, usage
from .test_properties import apply, clusters, events, snapshot_of


def _forgetful(snap):
    """A copy of ``snap`` with nothing carried over from earlier cycles: the engine then computes everything anew."""
    fresh = copy.deepcopy(snap)
    fresh.quota_blocked.clear()
    fresh.verdicts.clear()
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


# queues that wait behind starving jobs: a guard of 0 or 3 s, jobs of unknown length (none ends before a held job
# could start), more of them
guarded = st.tuples(clusters(), st.sampled_from([0, 3]))
waiting = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 3), st.sampled_from([1, 2, 4]), st.integers(1, 3),
              st.sampled_from([-1, 10, 90]), st.sampled_from([None, None, None, 5.0]), st.sampled_from(["ann", "bob"])),
    st.tuples(st.just("finish"), st.integers(0, 50))), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(guarded, waiting, st.booleans())
def test_an_offer_known_to_fail_fails_with_no_decision_when_tried(drawn, evs, whole_nodes):
    """``known_to_fail`` (a job behind its team's starving job, or over its team's own limit as before) skips only
    tries that would fail and say nothing new: after each cycle's starvation guard, every waiting job it says so of
    fails when tried on a copy, with no decision and the cluster as it was (fails if a job behind a starving one is
    skipped whatever its reason, or where it may now start)."""
    (nodes, teams, policy), guard = drawn
    snap, teams = snapshot_of((nodes, teams, {**policy, "starvation_guard_seconds": guard}))
    now = 0.0
    for i, ev in enumerate(evs * 2):
        now += 1
        apply(snap, teams, ev, f"j{i}", now, whole_nodes)
        snap.now = now
        probe = copy.deepcopy(snap)
        cyc = _Cycle(probe)
        cyc.begin()
        cyc.guard()
        for jid in sorted(probe.pending):
            if not cyc.known_to_fail(probe.pending[jid]):
                continue
            tried = _Cycle(copy.deepcopy(snap))  # the same cycle up to here, on a copy (a cycle is not copied)
            tried.begin()
            tried.guard()
            before = (repr(tried.snap.running), tried.snap.version, len(tried.out))
            assert not tried.try_start(tried.snap.pending[jid]), f"cycle {i}: {jid}"
            assert (repr(tried.snap.running), tried.snap.version, len(tried.out)) == before, f"cycle {i}: {jid}"
        cycle(snap, now)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), events, st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["fail", "fail", "take"])),
                                    max_size=40), st.booleans())
def test_a_rounds_search_from_its_last_offer_finds_what_a_scan_from_the_top_finds(cluster, evs, steps, within):
    """``offer_of`` goes on from where it found a team's last offer while the queue is unchanged: the same offer as a
    search from the queue's first job, as shapes fail, shapes pass over for borrowing, and jobs leave the queue
    (fails if the search goes on after the queue changed)."""
    snap, teams = snapshot_of(cluster)
    for i, ev in enumerate(evs):
        apply(snap, teams, ev, f"j{i}", float(i + 1), False)
    cyc = _Cycle(snap)
    failed: dict[str, set] = {}
    borrowing: dict[str, set] = {}
    at: dict[str, tuple[list, int]] = {}
    names = sorted(snap.teams)
    for ti, what in steps:
        t = snap.teams[names[ti % len(names)]]
        scan_b = set(borrowing.get(t.name, ())) if within else None
        scan = cyc.offer_of(t, failed.get(t.name), scan_b)
        got = cyc.offer_of(t, failed.get(t.name), borrowing.setdefault(t.name, set()) if within else None, at)
        assert got is scan and (not within or scan_b == borrowing[t.name])
        if got is None:
            continue
        if what == "fail":
            failed.setdefault(t.name, set()).add(got.shape)
        else:
            snap.remove_pending(got.id)


def test_a_job_behind_a_starving_job_of_its_team_is_told_so_once():
    """a1 has waited past the guard and cannot start (team b fills the cluster); a2 and, later, a3 could delay it, so
    each waits behind it: each is told so in the cycle it arrives, and nothing is said again while that holds."""
    snap = make(2, [{"name": "a", "quota": 4, "limit": 100}, {"name": "b", "quota": 4}], starvation_guard_seconds=0)
    submit(snap, "b1", "b", 4, t=0)
    submit(snap, "b2", "b", 4, t=0)
    cycle(snap, 0)
    submit(snap, "a1", "a", 4, n=2, t=1)
    submit(snap, "a2", "a", 2, t=1)
    behind = "waiting behind job a1 of team a, which has waited longest and has capacity held for it"
    assert [(d.job, d.reason) for d in cycle(snap, 1)] == [("a1", "no idle unit4 capacity to borrow"),
                                                           ("a2", behind)]
    assert cycle(snap, 2) == []
    submit(snap, "a3", "a", 1, t=3)
    assert [(d.job, d.reason) for d in cycle(snap, 3)] == [("a3", behind)]
    assert cycle(snap, 4) == []


def test_a_job_behind_a_starving_job_starts_once_it_can_no_longer_delay_it():
    """a2 waits behind a1 (which must borrow and finds nothing to borrow) while a2 would take a's quota from it; when
    a0 ends, a2 fits beside a1 within a's limits and starts in that cycle, though its reason is the same as before."""
    snap = make(3, [{"name": "a", "quota": 4, "limit": 200}, {"name": "b", "quota": 8}], starvation_guard_seconds=0)
    for jid, team in (("a0", "a"), ("b1", "b"), ("b2", "b")):
        submit(snap, jid, team, 4, t=0)
    cycle(snap, 0)
    submit(snap, "a1", "a", 4, n=2, t=1)
    submit(snap, "a2", "a", 1, t=1)
    assert [d.job for d in cycle(snap, 1)] == ["a1", "a2"]
    assert snap.pending["a2"].reason.startswith("waiting behind job a1")
    assert cycle(snap, 2) == []
    snap.finish("a0")
    assert [d.job for d in cycle(snap, 3) if isinstance(d, Admit)] == ["a2"]


def test_a_job_that_could_end_before_its_teams_starving_job_starts_waits_behind_it_once_it_no_longer_can():
    """a2 (over a's borrow limit) may start beside a's starving a1 only while it would end before a1 can start (at
    1,000 s, when b's jobs end); its offer is known to fail until then, and the cycle after that time tells it to
    wait behind a1 (fails if a team's verdict is kept past the time one of its jobs no longer ends in time)."""
    snap = make(3, [{"name": "a", "quota": 4, "limit": 100}, {"name": "b", "quota": 8}], starvation_guard_seconds=0)
    for jid, team, expected in (("a0", "a", 1000.0), ("b1", "b", 1000.0), ("b2", "b", 1000.0)):
        submit(snap, jid, team, 4, t=0).expected = expected
    cycle(snap, 0)
    submit(snap, "a1", "a", 4, t=1)
    submit(snap, "a2", "a", 4, n=2, t=1).expected = 30.0
    assert [d.job for d in cycle(snap, 1)] == ["a1", "a2"]
    assert snap.pending["a2"].reason.startswith("borrow limit reached")
    for t in (2, 500, 960):
        assert cycle(snap, t) == []
    assert [(d.job, d.reason) for d in cycle(snap, 980)] == [
        ("a2", "waiting behind job a1 of team a, which has waited longest and has capacity held for it")]


def test_a_job_behind_its_teams_starving_job_is_tried_once_the_time_held_for_that_job_is_known():
    """a1 starves and finds no nodes to hold (c1, starving longer, holds two of the three): it has no time to start
    yet, so a2 could delay it and waits behind it. When c1 leaves, a1 holds nodes free by 1,000 s; a2 (10 s) ends
    before that, so it is tried in that cycle, and reclaims its team's quota from b (fails if a team's verdict is
    kept after the time held for its starving job changed)."""
    snap = make(3, [{"name": "a", "quota": 4, "limit": 100}, {"name": "b", "quota": 4, "limit": 200},
                    {"name": "c", "quota": 4, "limit": 100}], starvation_guard_seconds=0)
    for jid in ("b1", "b2", "b3"):
        submit(snap, jid, "b", 4, t=0).expected = 1000.0
    cycle(snap, 0)
    assert len(snap.running) == 3
    submit(snap, "c1", "c", 4, n=2, t=1)
    submit(snap, "a1", "a", 4, n=2, t=2)
    submit(snap, "a2", "a", 1, t=2).expected = 10.0
    cycle(snap, 2)
    assert snap.pending["a2"].reason.startswith("waiting behind job a1")
    assert cycle(snap, 3) == []
    snap.remove_pending("c1")
    ds = cycle(snap, 4)
    assert [d.job for d in ds if isinstance(d, Admit)] == ["a2"]
