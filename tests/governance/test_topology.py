"""Topology-aware placement: required and preferred levels, best fit by level, reasons, reclaim, the guard."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairpod.governance import Workload
from fairpod.governance.build import snapshot_from_spec
from fairpod.governance.decisions import Admit, Preempt, net_changes
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.teams import Team
from fairpod.model.jobs import JobSpec, resolve_job
from fairpod.model.spec import SpecError, parse_spec

from .helpers import T, admitted, cycle, per, preempted, waits
from .test_properties import check_invariants


def topo_spec(racks: list[tuple[str, str, int]], teams: list[dict[str, Any]] | None = None,
              **policy: Any) -> dict[str, Any]:
    """A spec dict: one instance group per (block, rack, nodes)."""
    teams = teams or [{"name": "a", "quota": 4 * sum(n for *_, n in racks)}]
    return {
        "cluster": {"name": "t", "topology_levels": ["block", "rack"], "instance_groups": [
            {"name": rack, "instance_type": T, "count": n, "topology": {"block": block, "rack": rack}}
            for block, rack, n in racks]},
        "instance_types": [{"name": T, "accelerators": 4, "vcpu": 16, "memory_gib": 64}],
        "policy": {"priority_classes": [{"name": "low", "weight": 10}, {"name": "high", "weight": 90}], **policy},
        "teams": [
            {"name": t["name"], "fair_share_weight": t.get("weight", 0),
             "sharing": {"strategy": t.get("strategy", "LendAndBorrow"), "borrow_limit": t.get("limit", 100)},
             "quota": [{"instance_type": T, "accelerators": t["quota"]}] if t.get("quota") else []}
            for t in teams],
    }


def topo(racks: list[tuple[str, str, int]], teams: list[dict[str, Any]] | None = None, **policy: Any) -> Snapshot:
    return snapshot_from_spec(parse_spec(topo_spec(racks, teams, **policy)))


def job(snap: Snapshot, jid: str, n: int, *, team: str = "a", acc: int = 4, level: str | None = None,
        required: bool = False, t: float | None = None, prio: int = -1) -> Workload:
    w = Workload(jid, team, T, n, per(acc), priority=prio, submit=snap.now if t is None else t,
                 topology=level, topology_required=required)
    snap.add_pending(w)
    return w


def racks_of(snap: Snapshot, jid: str, level: int = 1) -> set[str]:
    return {snap.nodes[n].topo[level] for n in snap.running[jid].nodes or ()}


def test_required_rack_places_every_replica_in_one_rack():
    snap = topo([("b0", "r0", 3), ("b0", "r1", 3), ("b0", "r2", 3)])
    job(snap, "small", 2)  # packs into one rack, leaving two whole
    job(snap, "big", 3, level="rack", required=True)
    ds = cycle(snap)
    assert sorted(admitted(ds)) == ["big", "small"]
    assert len(racks_of(snap, "big")) == 1
    assert racks_of(snap, "big") != racks_of(snap, "small")


def test_best_fit_by_rack_keeps_the_large_rack_whole():
    # r0 has 4 nodes, r1 has 2: a 2-node rack job takes r1 (the smallest rack it fits), so the 4-node rack
    # job that comes later still has a whole rack
    snap = topo([("b0", "r0", 4), ("b0", "r1", 2)])
    job(snap, "two", 2, level="rack", required=True)
    cycle(snap)
    assert racks_of(snap, "two") == {"b0/r1"}
    job(snap, "four", 4, level="rack", required=True)
    assert admitted(cycle(snap)) == ["four"]
    assert racks_of(snap, "four") == {"b0/r0"}


def test_required_rack_that_no_rack_can_ever_hold_says_so():
    snap = topo([("b0", "r0", 3), ("b0", "r1", 3)])
    job(snap, "big", 4, level="rack", required=True)
    ds = cycle(snap)
    assert not admitted(ds)
    assert waits(ds)["big"] == "needs 4 healthy unit4 nodes in one rack; the largest rack has 3 (rack r0)"


def test_required_rack_waits_for_a_free_rack_while_preferred_spreads():
    snap = topo([("b0", "r0", 4), ("b0", "r1", 4)])
    for i, rack in enumerate(("r0", "r0", "r1", "r1")):  # two busy nodes in each rack
        w = Workload(f"busy{i}", "a", T, 1, per(4))
        snap.add_pending(w)
        snap.start(w, [f"{rack}-{i % 2}"], 0.0)
    job(snap, "req", 4, level="rack", required=True)
    job(snap, "pref", 4, level="rack")
    ds = cycle(snap)
    assert admitted(ds) == ["pref"]
    assert len(racks_of(snap, "pref")) == 2
    assert waits(ds)["req"] == ("waiting for topology: no rack has 4 unit4 nodes with 4 free accelerators each "
                                "(most now: 2, in rack r0); the job requires one rack")
    for i in range(4):
        snap.finish(f"busy{i}")
    snap.finish("pref")
    assert admitted(cycle(snap, 1)) == ["req"]
    assert len(racks_of(snap, "req")) == 1


def test_preferred_rack_goes_up_to_one_block_before_spreading_over_blocks():
    snap = topo([("b0", "r0", 2), ("b0", "r1", 2), ("b1", "r2", 3), ("b1", "r3", 3)])
    job(snap, "pref", 4, level="rack")  # no rack has 4: one block, the best fit one (b0 with 4, not b1 with 6)
    cycle(snap)
    assert racks_of(snap, "pref", 0) == {"b0"}
    job(snap, "wide", 5, level="rack")  # b1 holds 6: still one block
    cycle(snap)
    assert racks_of(snap, "wide", 0) == {"b1"}
    assert len(racks_of(snap, "wide")) == 2


def test_preferred_takes_as_few_racks_as_possible_when_no_block_holds_it():
    snap = topo([("b0", "r0", 4), ("b1", "r1", 1), ("b2", "r2", 3), ("b3", "r3", 2)])
    job(snap, "pref", 6, level="rack")
    cycle(snap)
    # largest first (r0: 4), then the best fit for the remaining 2 (r3 with 2, not r2 with 3)
    assert racks_of(snap, "pref") == {"b0/r0", "b3/r3"}


def test_jobs_without_a_level_pack_into_the_fullest_rack():
    snap = topo([("b0", "r0", 4), ("b0", "r1", 4)])
    job(snap, "one", 1, acc=4)
    cycle(snap)
    first = racks_of(snap, "one")
    job(snap, "two", 2, acc=4)
    cycle(snap)
    assert racks_of(snap, "two") == first  # the rack already in use, not the whole one
    job(snap, "rack", 4, level="rack", required=True)
    assert admitted(cycle(snap)) == ["rack"]
    assert racks_of(snap, "rack") != first


def test_reclaim_for_a_required_rack_takes_victims_in_one_rack_only():
    snap = topo([("b0", "r0", 4), ("b0", "r1", 4)],
                [{"name": "a", "quota": 16}, {"name": "b", "quota": 16}])
    for i in range(8):
        job(snap, f"b{i}", 1, team="b", t=0)
    assert len(admitted(cycle(snap, 0))) == 8  # b borrows a's idle rack
    job(snap, "a-rack", 4, team="a", level="rack", required=True, t=1)
    ds = cycle(snap, 1)
    assert admitted(ds) == ["a-rack"]
    victims = preempted(ds)
    assert len(victims) == 4  # no more than needed
    assert all(d.kind == "reclaim" for d in ds if isinstance(d, Preempt))
    assert len(racks_of(snap, "a-rack")) == 1


def test_starving_required_job_holds_nodes_in_one_rack():
    snap = topo([("b0", "r0", 3), ("b0", "r1", 3)], [{"name": "a", "quota": 12}, {"name": "b", "quota": 12}],
                starvation_guard_seconds=0)
    for i, node in enumerate(("r0-0", "r1-0", "r1-1")):
        w = Workload(f"busy{i}", "b", T, 1, per(4), expected=100.0)
        snap.add_pending(w)
        snap.start(w, [node], 0.0)
    job(snap, "req", 3, level="rack", required=True, t=0)
    job(snap, "small", 1, team="b", t=0)
    ds = cycle(snap, 1)
    assert "req" in waits(ds)
    # the held nodes: r0 (one busy node), all three; the small job runs elsewhere (r1-2)
    assert snap.running["small"].nodes == ["r1-2"]


def test_spec_and_job_validation_of_topology():
    bad = topo_spec([("b0", "r0", 2)])
    bad["cluster"]["instance_groups"][0]["topology"] = {"rack": "r0", "row": "x"}
    with pytest.raises(SpecError) as e:
        parse_spec(bad)
    assert "cluster.instance_groups[0].topology.row: unknown topology level (cluster.topology_levels: block, " \
           "rack)" in e.value.problems
    missing = topo_spec([("b0", "r0", 2)])
    missing["cluster"]["instance_groups"][0]["topology"] = {"block": "b0"}
    with pytest.raises(SpecError, match="node r0-0 has no domain for every topology level"):
        parse_spec(missing)
    per_node = topo_spec([("b0", "r0", 2)])
    per_node["cluster"]["instance_groups"][0]["node_topology"] = {"r0-1": {"rack": "r9"}, "r0-7": {"rack": "x"}}
    with pytest.raises(SpecError, match="'r0-7' is not a node of group 'r0'"):
        parse_spec(per_node)
    del per_node["cluster"]["instance_groups"][0]["node_topology"]["r0-7"]
    spec = parse_spec(per_node)
    snap = snapshot_from_spec(spec)
    assert snap.nodes["r0-0"].topo == ("b0", "b0/r0") and snap.nodes["r0-1"].topo == ("b0", "b0/r9")
    with pytest.raises(ValueError, match="the cluster has no topology level 'row'"):
        resolve_job(JobSpec(name="j", team="a", required_topology="row"), spec)
    with pytest.raises(ValueError, match="not both"):
        resolve_job(JobSpec(name="j", team="a", required_topology="rack", preferred_topology="rack"), spec)
    resolve_job(JobSpec(name="j", team="a", preferred_topology="block"), spec)


# -- properties ------------------------------------------------------------------------------------


@st.composite
def topologies(draw: st.DrawFn):
    racks = []
    for b in range(draw(st.integers(1, 2))):
        for r in range(draw(st.integers(1, 3))):
            racks.append((f"b{b}", f"r{b}{r}", draw(st.integers(1, 3))))
    nodes = sum(n for *_, n in racks)
    q0 = draw(st.integers(0, nodes))
    teams = [{"name": "t0", "quota": 4 * q0, "weight": draw(st.integers(0, 100))},
             {"name": "t1", "quota": 4 * draw(st.integers(0, nodes - q0)), "weight": draw(st.integers(0, 100)),
              "strategy": draw(st.sampled_from(["LendAndBorrow", "Lend"])), "limit": draw(st.sampled_from([50, 500]))}]
    policy = {
        "task_prioritization": draw(st.sampled_from(["TaskRanking", "FirstComeFirstServe"])),
        "idle_compute_allocation": draw(st.sampled_from(["FairShare", "FirstComeFirstServe"])),
        "starvation_guard_seconds": draw(st.sampled_from([600, 0, 3])),
    }
    return racks, teams, policy


topo_events = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(0, 1), st.sampled_from([1, 2, 4]), st.integers(1, 4),
                  st.sampled_from([-1, 10, 90]), st.sampled_from([None, "rack", "block"]), st.booleans(),
                  st.sampled_from([None, 5.0])),
        st.tuples(st.just("finish"), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(), topo_events)
def test_topology_invariants_over_random_event_sequences(cluster, evs):
    racks, teams, policy = cluster
    snap = topo(racks, teams, **policy)
    preempted_by: set[tuple[str, str]] = set()
    now = 0.0
    for i, ev in enumerate(evs):
        now += 1
        if ev[0] == "submit":
            _, ti, acc, n, prio, level, required, expected = ev
            w = job(snap, f"j{i}", n, team=teams[ti]["name"], acc=acc, level=level,
                    required=required and level is not None, t=now, prio=prio)
            w.expected = expected
        elif snap.running:
            snap.finish(sorted(snap.running)[ev[1] % len(snap.running)])
        ds = net_changes(cycle(snap, now))
        for d in ds:
            if isinstance(d, Preempt):
                assert d.job in snap.pending and d.job not in snap.running
                assert (d.by, d.job) not in preempted_by, f"{d.job} and {d.by} preempt each other"
                preempted_by.add((d.job, d.by))
            if isinstance(d, Admit):
                w = snap.running[d.job]
                assert len(d.nodes) == w.n  # all replicas or none
        # capacity, quota and borrow limits, gang on distinct nodes
        check_invariants(snap, whole_nodes=False)
        # a required level is always honoured
        for w in snap.running.values():
            if w.topology_required and w.topology is not None:
                lv = snap.levels.index(w.topology)
                assert len({snap.nodes[n].topo[lv] for n in w.nodes or ()}) == 1, (w.id, w.nodes)
    assert not [d for d in cycle(snap, now + 0.5) if isinstance(d, Preempt)]


def test_a_node_without_a_rack_shares_its_rack_with_no_other_node():
    snap = Snapshot(topology_levels=("block", "rack"))
    for name in ("x", "y"):  # e.g. Ray nodes without a rack label
        snap.add_node(name, T, per(4), topology=("b0", ""))
    snap.add_team(Team("a", quota={T: per(8)}))
    job(snap, "rack", 2, level="rack", required=True)
    job(snap, "block", 2, level="block", required=True)
    ds = cycle(snap)
    assert admitted(ds) == ["block"]
    assert waits(ds)["rack"] == "needs 2 healthy unit4 nodes in one rack; the largest rack has 1 (rack x)"
    assert snap.nodes["x"].topo == ("b0", "b0/?x")


def test_a_required_level_the_spec_no_longer_has_keeps_the_job_waiting():
    for levels in ((), ("block",)):
        snap = Snapshot(topology_levels=levels)
        for name in ("x", "y"):
            snap.add_node(name, T, per(4), topology=("b0",) if levels else ())
        snap.add_team(Team("a", quota={T: per(8)}))
        job(snap, "req", 2, level="rack", required=True)
        job(snap, "pref", 1, level="rack")  # a preferred level is only a wish: placed anyway
        ds = cycle(snap)
        assert admitted(ds) == ["pref"]
        assert waits(ds)["req"] == ("requires topology level 'rack', which the cluster does not have "
                                    f"(cluster.topology_levels: {', '.join(levels) or 'none'})")
