"""Elastic jobs (rule 11): admission at N..M replicas, growth into idle capacity, shrink before preemption."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairpod.governance import Grow, Shrink, Workload
from fairpod.governance import elastic as elastic_rules
from fairpod.governance.decisions import Admit, Preempt, Wait, net_changes
from fairpod.governance.scheduler import _Cycle

from .helpers import T, admitted, cycle, make, per, preempted, submit, waits
from .test_properties import check_invariants, clusters


def elastic(snap, jid: str, team: str, lo: int, hi: int, *, acc: int = 4, t: float | None = None,
            prio: int = -1, min_runtime: float = 0.0) -> Workload:
    w = Workload(jid, team, T, lo, per(acc), priority=prio, submit=snap.now if t is None else t,
                 min_runtime=min_runtime, min_n=lo, max_n=hi)
    snap.add_pending(w)
    return w


def grows(ds) -> dict[str, tuple[str, ...]]:
    return {d.job: d.added for d in ds if isinstance(d, Grow)}


def shrinks(ds) -> dict[str, Shrink]:
    return {d.job: d for d in ds if isinstance(d, Shrink)}


def test_admitted_with_the_minimum_when_only_that_fits():
    snap = make(4, [{"name": "a", "quota": 16}])
    submit(snap, "other", "a", 4, n=2)
    e = elastic(snap, "e", "a", 2, 4)
    ds = net_changes(cycle(snap))
    assert [d.nodes for d in ds if isinstance(d, Admit) and d.job == "e"] == [tuple(e.nodes)]
    assert e.n == 2 and len(set(e.nodes) | set(snap.running["other"].nodes)) == 4
    assert grows(ds) == {}


def test_waits_whole_below_its_minimum():
    snap = make(4, [{"name": "a", "quota": 16}])
    submit(snap, "other", "a", 4, n=3)
    e = elastic(snap, "e", "a", 2, 4)
    ds = cycle(snap)
    assert "e" not in admitted(ds) and "e" in waits(ds)
    assert e.nodes is None and e.n == 2 and snap.teams["a"].u(T)[0] == 12


def test_admitted_with_the_largest_size_within_quota_then_grows_by_borrowing():
    snap = make(4, [{"name": "a", "quota": 8}, {"name": "b", "quota": 8}])
    e = elastic(snap, "e", "a", 1, 4)
    raw = cycle(snap)
    (adm,) = [d for d in raw if isinstance(d, Admit)]
    assert len(adm.nodes) == 2 and adm.borrowed == 0  # the largest size within quota at admission
    assert len(grows(raw)["e"]) == 2 and "borrowing 8" in [d for d in raw if isinstance(d, Grow)][0].reason
    (net,) = net_changes(raw)  # one decision: admitted on all four nodes
    assert isinstance(net, Admit) and len(net.nodes) == 4 and e.n == 4
    assert cycle(snap, 1) == []  # at its maximum: nothing more


def test_grows_when_another_job_ends():
    snap = make(4, [{"name": "a", "quota": 16}])
    submit(snap, "smith", "a", 4, n=2)
    e = elastic(snap, "e", "a", 2, 4)
    cycle(snap)
    snap.finish("smith")
    ds = cycle(snap, 10)
    assert len(grows(ds)["e"]) == 2 and e.n == 4 and len(set(e.nodes)) == 4
    g = [d for d in ds if isinstance(d, Grow)][0]
    assert g.nodes[:2] == tuple(e.nodes[:2])  # ranks 0..1 stay where they were; new ranks are appended


def test_shrinks_on_reclaim_instead_of_preemption_and_never_below_its_minimum():
    snap = make(4, [{"name": "a", "quota": 8}, {"name": "b", "quota": 8}])
    e = elastic(snap, "e", "a", 2, 4)
    cycle(snap)
    assert e.n == 4
    submit(snap, "john1", "b", 4, t=1)
    ds = net_changes(cycle(snap, 1))
    s = shrinks(ds)["e"]
    assert s.kind == "reclaim" and s.by == "john1" and len(s.removed) == 1 and "reclaims" in s.reason
    assert preempted(ds) == [] and admitted(ds) == ["john1"] and e.n == 3
    assert snap.running["john1"].nodes == [s.removed[0]]
    submit(snap, "john2", "b", 4, t=2)
    ds = net_changes(cycle(snap, 2))
    assert shrinks(ds)["e"].removed and e.n == 2 and admitted(ds) == ["john2"]
    # team a is within its quota now: a third job of b would borrow and finds nothing to reclaim below N
    submit(snap, "john3", "b", 4, t=3)
    ds = net_changes(cycle(snap, 3))
    assert e.n == 2 and "john3" not in admitted(ds) and shrinks(ds) == {} and preempted(ds) == []
    assert e.id in snap.running


def test_shrink_is_preferred_to_a_whole_preemption():
    # team a runs e (2 of 1..2 nodes, within quota) and f (1 node, borrowing); b reclaims one node
    snap = make(3, [{"name": "a", "quota": 8}, {"name": "b", "quota": 4}])
    e = elastic(snap, "e", "a", 1, 2, t=0)
    cycle(snap, 0)
    submit(snap, "f", "a", 4, t=1)
    cycle(snap, 1)
    assert e.n == 2 and "f" in snap.running
    submit(snap, "b1", "b", 4, t=2)
    ds = net_changes(cycle(snap, 2))
    assert preempted(ds) == [] and list(shrinks(ds)) == ["e"] and admitted(ds) == ["b1"]
    assert "f" in snap.running and e.n == 1


def test_without_elastic_jobs_the_same_case_preempts_whole():
    snap = make(3, [{"name": "a", "quota": 8}, {"name": "b", "quota": 4}])
    submit(snap, "e", "a", 4, n=2, t=0)
    cycle(snap, 0)
    submit(snap, "f", "a", 4, t=1)
    cycle(snap, 1)
    submit(snap, "b1", "b", 4, t=2)
    ds = net_changes(cycle(snap, 2))
    assert preempted(ds) == ["f"]


def test_grown_replicas_yield_to_the_teams_queue_but_not_to_lower_priority():
    snap = make(4, [{"name": "a", "quota": 16}], task_prioritization="TaskRanking")
    e = elastic(snap, "e", "a", 1, 4, prio=50)
    cycle(snap)
    assert e.n == 4
    submit(snap, "low", "a", 4, n=2, t=1, prio=10)
    ds = net_changes(cycle(snap, 1))
    assert e.n == 4 and "low" in waits(ds)
    submit(snap, "same", "a", 4, n=2, t=2, prio=50)
    ds = net_changes(cycle(snap, 2))
    assert shrinks(ds)["e"].kind == "team" and admitted(ds) == ["same"] and e.n == 2


def test_whole_preemption_of_an_elastic_job_at_its_minimum_requeues_it_at_its_minimum():
    snap = make(2, [{"name": "a", "quota": 4}, {"name": "b", "quota": 4}])
    submit(snap, "a0", "a", 4, t=0)
    e = elastic(snap, "e", "a", 1, 2, t=0)
    cycle(snap, 0)
    assert e.n == 1 and e.id in snap.running  # borrowing b's idle node
    submit(snap, "b1", "b", 4, t=1)
    ds = net_changes(cycle(snap, 1))
    assert preempted(ds) == ["e"] and e.n == 1 and e.id in snap.pending and e.nodes is None


def test_no_growth_right_after_a_shrink():
    snap = make(4, [{"name": "a", "quota": 8}, {"name": "b", "quota": 8}])
    e = elastic(snap, "e", "a", 2, 4)
    cycle(snap, 0)
    submit(snap, "j", "b", 4, t=1)
    assert shrinks(net_changes(cycle(snap, 1)))
    snap.finish("j")
    for t in (2, 3, 30):  # capacity is idle again, but the job shrank just now: it does not grow back yet
        assert net_changes(cycle(snap, t)) == [] and e.n == 3
    ds = net_changes(cycle(snap, 1 + snap.elastic_holdoff))
    assert len(grows(ds)["e"]) == 1 and e.n == 4


def test_growth_leaves_nodes_held_for_a_starving_job():
    snap = make(4, [{"name": "a", "quota": 8}, {"name": "b", "quota": 8}])
    e = elastic(snap, "e", "b", 1, 4, t=0)
    submit(snap, "a0", "a", 4, n=1, t=0)
    cycle(snap, 0)
    snap.finish("a0")
    snap.unassign(e)
    e.set_n(1)
    e.nodes = ["g-1"]
    snap.assign(e, e.nodes)
    cyc = _Cycle(snap)
    cyc.reserved = {"g-2": "big"}  # held by the starvation guard for another team's job
    elastic_rules.grow(cyc)
    assert e.n == 3 and "g-2" not in e.nodes
    (g,) = [d for d in cyc.out if isinstance(d, Grow)]
    assert set(g.added) == {"g-0", "g-3"} and g.nodes[0] == "g-1"


def test_net_changes_folds_resizes_into_admit_and_drops_them_for_preempted_jobs():
    raw = [Admit("j", ("n0", "n1"), "r"), Grow("j", ("n0", "n1", "n2"), ("n2",), "g")]
    assert net_changes(raw) == [Admit("j", ("n0", "n1", "n2"), "r")]
    raw = [Admit("j", ("n0", "n1"), "r"), Shrink("j", ("n0",), ("n1",), "k", "reclaim", "s")]
    assert net_changes(raw) == [Admit("j", ("n0",), "r")]
    raw = [Shrink("j", ("n0",), ("n1",), "k", "reclaim", "s"), Preempt("j", "m", "reclaim", "p")]
    assert net_changes(raw) == [Preempt("j", "m", "reclaim", "p")]
    s = Shrink("j", ("n0",), ("n1",), "k", "reclaim", "s")
    assert net_changes([s, Admit("k", ("n1",), "r")]) == [s, Admit("k", ("n1",), "r")]
    # admitted, shrunk and taken back in one cycle: it never ran
    raw = [Admit("j", ("n0", "n1"), "r"), Shrink("j", ("n0",), ("n1",), "k", "team", "s"),
           Preempt("j", "m", "priority", "p")]
    out = net_changes(raw)
    assert [type(d) for d in out] == [Wait]


# -- properties ----------------------------------------------------------------------------------------

el_events = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(0, 3), st.sampled_from([1, 2, 4]), st.integers(1, 3),
                  st.integers(0, 3), st.sampled_from([-1, 10, 50, 90])),
        st.tuples(st.just("finish"), st.integers(0, 50)),
        st.tuples(st.just("tick"), st.sampled_from([1.0, 30.0, 90.0])),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), el_events, st.booleans())
def test_elastic_invariants_over_random_event_sequences(cluster, evs, whole_nodes):
    nodes, teams, policy = cluster
    snap = make(nodes, teams, **policy)
    applied: dict[str, list[str]] = {}  # what a caller applying the net decisions believes runs where
    shrunk_at: dict[str, float] = {}
    now = 0.0
    for i, ev in enumerate(evs):
        now += ev[1] if ev[0] == "tick" else 1
        if ev[0] == "submit":
            _, ti, acc, n, extra, prio = ev
            team = teams[ti % len(teams)]["name"]
            if extra:
                elastic(snap, f"j{i}", team, n, n + extra, acc=4 if whole_nodes else acc, t=now, prio=prio)
            else:
                submit(snap, f"j{i}", team, 4 if whole_nodes else acc, n=n, t=now, prio=prio)
        elif ev[0] == "finish" and snap.running:
            jid = sorted(snap.running)[ev[1] % len(snap.running)]
            snap.finish(jid)
            applied.pop(jid, None)
        for d in net_changes(cycle(snap, now)):
            if isinstance(d, Admit):
                applied[d.job] = list(d.nodes)
            elif isinstance(d, Preempt):
                applied.pop(d.job)
            elif isinstance(d, Shrink):
                assert applied[d.job][:len(d.nodes)] == list(d.nodes), "a shrink keeps the lowest ranks"
                assert sorted(applied[d.job][len(d.nodes):]) == sorted(d.removed)
                applied[d.job] = list(d.nodes)
                shrunk_at[d.job] = now
            elif isinstance(d, Grow):
                assert now - shrunk_at.get(d.job, -1e9) >= snap.elastic_holdoff, "grew right after a shrink"
                assert applied[d.job] + list(d.added) == list(d.nodes), "growth appends ranks"
                applied[d.job] = list(d.nodes)
        check_invariants(snap, whole_nodes)
        # the decisions tell a caller exactly where every replica runs
        assert applied == {j: w.nodes for j, w in snap.running.items()}
        for w in snap.running.values():
            if w.max_n:
                assert w.min_n <= w.n <= w.max_n and len(w.nodes) == w.n  # no partial placement below N
        for w in snap.pending.values():
            assert w.nodes is None and (not w.max_n or w.n == w.min_n)
    # stable: a further cycle at the same time shrinks or preempts nothing of itself
    ds = net_changes(cycle(snap, now))
    assert not [d for d in ds if isinstance(d, Preempt | Shrink)]


# -- topology ------------------------------------------------------------------------------------------


def test_growth_stays_in_the_required_rack_and_prefers_the_preferred_one():
    from .test_topology import topo

    snap = topo([("b0", "r0", 2), ("b0", "r1", 3)])
    req = Workload("req", "a", T, 1, per(4), min_n=1, max_n=4, topology="rack", topology_required=True)
    snap.add_pending(req)
    ds = net_changes(cycle(snap))
    # the smaller rack fits its minimum best; it grows to that rack's 2 nodes, never into r1 (3 idle nodes)
    assert [d.nodes for d in ds if isinstance(d, Admit)] == [("r0-0", "r0-1")] and req.n == 2
    assert all(not nd.jobs for nd in snap.nodes.values() if nd.name.startswith("r1"))
    snap = topo([("b0", "r0", 3), ("b0", "r1", 2)])  # by name alone, growth would go to r0 first
    pref = Workload("pref", "a", T, 1, per(4), min_n=1, max_n=4, topology="rack", submit=1)
    snap.add_pending(pref)
    ds = net_changes(cycle(snap, 1))
    (adm,) = [d for d in ds if isinstance(d, Admit)]
    # 4 replicas need both racks: the first rack it used is filled before the other one is entered
    assert len(adm.nodes) == 4
    first = snap.nodes[adm.nodes[0]].topo[1]
    k = sum(1 for n in adm.nodes if snap.nodes[n].topo[1] == first)
    assert all(snap.nodes[n].topo[1] == first for n in adm.nodes[:k])
    assert first == "b0/r1" and k == 2  # its minimum went to the best-fitting rack r1, which it filled first
