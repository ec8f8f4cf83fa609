"""Table tests, one group per engine rule (see fairpod.governance)."""

from __future__ import annotations

import pytest

from fairpod.governance import Workload
from fairpod.governance.build import snapshot_from_spec
from fairpod.governance.decisions import Admit, Preempt
from fairpod.model.resources import Res
from fairpod.model.spec import parse_spec

from .helpers import admitted, cycle, make, preempted, submit, usage, waits

# -- rule 1: gang admission, best fit ---------------------------------------------------------------


def test_gang_is_all_or_nothing():
    snap = make(2, [{"name": "a", "quota": 8}])
    submit(snap, "big", "a", 4, n=3)
    ds = cycle(snap)
    assert admitted(ds) == []
    assert "needs 3" in waits(ds)["big"]
    assert usage(snap, "a") == 0 and all(nd.free[0] == 4 for nd in snap.nodes.values())


def test_gang_replicas_on_distinct_nodes():
    snap = make(3, [{"name": "a", "quota": 12}])
    submit(snap, "j", "a", 2, n=3)
    ds = cycle(snap)
    (adm,) = [d for d in ds if isinstance(d, Admit)]
    assert len(set(adm.nodes)) == 3


@pytest.mark.parametrize(
    "first, second, second_node",
    [
        (2, 2, "g-0"),  # packs onto the half-used node
        (3, 1, "g-0"),
        (1, 4, "g-1"),  # a whole-node job takes the free node
    ],
)
def test_best_fit_keeps_whole_nodes_free(first, second, second_node):
    snap = make(2, [{"name": "a", "quota": 8}])
    submit(snap, "j1", "a", first)
    assert [d.nodes for d in cycle(snap) if isinstance(d, Admit)] == [("g-0",)]
    submit(snap, "j2", "a", second)
    assert [d.nodes for d in cycle(snap) if isinstance(d, Admit)] == [(second_node,)]


# -- rule 2: quota and borrowing --------------------------------------------------------------------


def test_within_quota_is_admitted_with_reason():
    snap = make(2, [{"name": "a", "quota": 4}, {"name": "b", "quota": 4}])
    submit(snap, "j", "a", 4)
    (adm,) = cycle(snap)
    assert isinstance(adm, Admit) and "within team a's quota" in adm.reason and adm.borrowed == 0


def test_seed_scenario_b_borrows_three_from_a():
    # Team A quota 6 using 2, team B quota 5 using 4; B submits 4 with borrow limit 100 -> 3 borrowed from A.
    snap = make(3, [{"name": "a", "quota": 6, "limit": 100}, {"name": "b", "quota": 5, "limit": 100}])
    submit(snap, "a1", "a", 2)
    submit(snap, "b1", "b", 4)
    assert sorted(admitted(cycle(snap))) == ["a1", "b1"]
    submit(snap, "b2", "b", 4)
    (adm,) = cycle(snap)
    assert isinstance(adm, Admit) and adm.job == "b2"
    assert adm.borrowed == 3 and adm.lenders == (("a", 3),)
    assert adm.reason.endswith("borrowing 3 accelerators from a")  # one lender: no count to repeat


@pytest.mark.parametrize(
    "strategy, limit, job_acc, expect",
    [
        ("LendAndBorrow", 50, 8, "borrow limit reached"),  # 4 quota + 50 % = 6 < 8
        ("LendAndBorrow", 100, 8, None),  # 4 + 100 % = 8
        ("Lend", 100, 8, "does not borrow"),
        ("DontLend", 100, 8, "does not borrow"),
    ],
)
def test_borrow_limit_and_strategy(strategy, limit, job_acc, expect):
    snap = make(4, [{"name": "a", "quota": 4, "strategy": strategy, "limit": limit}, {"name": "l", "quota": 12}])
    submit(snap, "j", "a", 4, n=job_acc // 4)
    ds = cycle(snap)
    if expect is None:
        assert admitted(ds) == ["j"]
    else:
        assert admitted(ds) == [] and expect in waits(ds)["j"]


def test_dont_lend_quota_is_never_borrowed():
    snap = make(4, [{"name": "keep", "quota": 12, "strategy": "DontLend"}, {"name": "b", "quota": 4, "limit": 500}])
    submit(snap, "b1", "b", 4)
    submit(snap, "b2", "b", 4)
    ds = cycle(snap)
    assert admitted(ds) == ["b1"]
    assert "no idle" in waits(ds)["b2"]


@pytest.mark.parametrize("sharing, expect", [("Enabled", ["a1", "a2"]), ("Disabled", ["a1"])])
def test_unallocated_capacity_borrowable_only_with_idle_resource_sharing(sharing, expect):
    snap = make(4, [{"name": "a", "quota": 4, "limit": 100}], idle_resource_sharing=sharing)
    submit(snap, "a1", "a", 4)
    submit(snap, "a2", "a", 4)
    assert admitted(cycle(snap)) == expect


# -- rule 3: reclaim --------------------------------------------------------------------------------


def test_seed_scenario_a_reclaim():
    snap = make(4, [{"name": "john", "quota": 12, "limit": 50}, {"name": "smith", "quota": 4, "weight": 100,
                                                                    "limit": 100}])
    submit(snap, "john-1", "john", 4, n=2)
    assert admitted(cycle(snap, 0)) == ["john-1"]
    assert usage(snap, "john") == 8  # 50 % of 16
    submit(snap, "smith-1", "smith", 4, n=2, t=1)
    (adm,) = cycle(snap, 1)
    assert adm.job == "smith-1" and adm.lenders == (("john", 4),)
    assert sum(nd.cap[0] - nd.free[0] for nd in snap.nodes.values()) == 16  # 100 %
    submit(snap, "john-2", "john", 4, t=2)
    ds = cycle(snap, 2)
    (pre,) = [d for d in ds if isinstance(d, Preempt)]
    assert pre.job == "smith-1" and pre.kind == "reclaim" and "reclaimed by team john for job john-2" in pre.reason
    (adm,) = [d for d in ds if isinstance(d, Admit)]
    assert adm.job == "john-2" and adm.after == ("smith-1",)
    assert "smith-1" in snap.pending


def test_reclaim_takes_no_more_than_needed_lowest_priority_then_newest():
    snap = make(4, [{"name": "a", "quota": 12}, {"name": "b", "quota": 4, "limit": 200}], task_prioritization="TaskRanking")
    submit(snap, "a1", "a", 4, n=2)
    cycle(snap, 0)
    submit(snap, "b-old-low", "b", 4, t=1, prio=10)
    cycle(snap, 1)
    submit(snap, "b-new-low", "b", 4, t=2, prio=10)
    cycle(snap, 2)
    assert usage(snap, "b") == 8
    submit(snap, "a2", "a", 4, t=3)
    ds = cycle(snap, 3)
    assert preempted(ds) == ["b-new-low"]  # one node is enough; most recently started of equal priority


def test_reclaim_prefers_lower_priority_victim():
    snap = make(4, [{"name": "a", "quota": 12}, {"name": "b", "quota": 4, "limit": 200}], task_prioritization="TaskRanking")
    submit(snap, "a1", "a", 4, n=2)
    cycle(snap, 0)
    submit(snap, "b-high", "b", 4, t=1, prio=90)
    submit(snap, "b-low", "b", 4, t=1, prio=10)
    cycle(snap, 1)
    submit(snap, "a2", "a", 4, t=3)
    assert preempted(cycle(snap, 3)) == ["b-low"]


# -- rule 4: priority -------------------------------------------------------------------------------


@pytest.mark.parametrize("ranking, first", [("TaskRanking", "high"), ("FirstComeFirstServe", "low")])
def test_priority_orders_the_team_queue(ranking, first):
    snap = make(1, [{"name": "a", "quota": 4}], task_prioritization=ranking)
    submit(snap, "low", "a", 4, t=0, prio=10)
    submit(snap, "high", "a", 4, t=1, prio=90)
    assert admitted(cycle(snap, 1)) == [first]


@pytest.mark.parametrize(
    "ranking, preempt, expect_preempted",
    [
        ("TaskRanking", "LowerPriority", ["low"]),
        ("TaskRanking", "Never", []),
        ("FirstComeFirstServe", "LowerPriority", []),
    ],
)
def test_preempt_own_lower_priority(ranking, preempt, expect_preempted):
    snap = make(1, [{"name": "a", "quota": 4, "preempt": preempt}], task_prioritization=ranking)
    submit(snap, "low", "a", 4, t=0, prio=10)
    cycle(snap, 0)
    submit(snap, "high", "a", 4, t=1, prio=90)
    ds = cycle(snap, 1)
    assert preempted(ds) == expect_preempted
    if expect_preempted:
        assert admitted(ds) == ["high"] and "higher-priority job high" in ds[0].reason


def test_unknown_priority_class_is_rejected_with_the_valid_list():
    from fairpod.model.jobs import JobSpec, resolve_job
    from fairpod.model.spec import seed_spec

    with pytest.raises(ValueError, match="unknown priority class 'urgent' \\(valid: inference, training\\)"):
        resolve_job(JobSpec(name="x", team="john", priority="urgent"), seed_spec())
    assert resolve_job(JobSpec(name="x", team="john"), seed_spec()).priority == -1  # lowest


# -- rule 5: fair share of idle capacity -------------------------------------------------------------


def _fair(alloc: str):
    # l lends 12 (three nodes); a and b each already borrow one node; one idle node remains.
    snap = make(5, [{"name": "l", "quota": 12}, {"name": "a", "quota": 4, "weight": 100, "limit": 500},
                    {"name": "b", "quota": 4, "weight": 1, "limit": 500}], idle_compute_allocation=alloc)
    for team in ("a", "b"):
        submit(snap, f"{team}0", team, 4, t=0)
        submit(snap, f"{team}1", team, 4, t=0)
    assert sorted(admitted(cycle(snap, 0))) == ["a0", "a1", "b0", "b1"]
    submit(snap, "b2", "b", 4, t=1)
    submit(snap, "a2", "a", 4, t=2)
    return snap


@pytest.mark.parametrize("alloc, winner", [("FairShare", "a2"), ("FirstComeFirstServe", "b2")])
def test_idle_capacity_goes_to_lowest_weighted_share(alloc, winner):
    snap = _fair(alloc)
    assert admitted(cycle(snap, 3)) == [winner]


def test_fair_share_preemption_and_no_ping_pong():
    snap = make(4, [{"name": "l", "quota": 8}, {"name": "a", "quota": 4, "weight": 100, "limit": 500},
                    {"name": "z", "quota": 4, "weight": 0, "limit": 500}])
    submit(snap, "a0", "a", 4, t=0)
    submit(snap, "z0", "z", 4, t=0)
    submit(snap, "z1", "z", 4, t=0)
    submit(snap, "z2", "z", 4, t=0)
    assert sorted(admitted(cycle(snap, 0))) == ["a0", "z0", "z1", "z2"]  # z borrows l's idle 8
    submit(snap, "a1", "a", 4, t=10)
    # fair share never destroys more work than it saves: z's jobs would lose 10 s x 4 accelerators, a1 has
    # waited nothing yet
    assert preempted(cycle(snap, 10)) == []
    for z in ("z0", "z1", "z2"):
        snap.running[z].checkpoint = 19.95  # now each loses 0.05 s x 4 if stopped at t=20: < 1/100 of a1's 10 s x 4
    ds = cycle(snap, 20)
    assert admitted(ds) == ["a1"] and len(preempted(ds)) == 1
    assert [d.kind for d in ds if isinstance(d, Preempt)] == ["fair-share"]
    for t in range(21, 30):  # the victim never preempts back
        assert preempted(cycle(snap, t)) == []


def test_fair_share_spares_a_job_preempted_twice_and_costly_victims():
    snap = make(4, [{"name": "l", "quota": 8}, {"name": "a", "quota": 4, "weight": 100, "limit": 500},
                    {"name": "z", "quota": 4, "weight": 0, "limit": 500}])
    submit(snap, "a0", "a", 4, t=0)
    for z in ("z0", "z1", "z2"):
        submit(snap, z, "z", 4, t=0)
    cycle(snap, 0)
    snap.running["z1"].preemptions = snap.running["z2"].preemptions = 2
    submit(snap, "a1", "a", 4, t=10)
    assert preempted(cycle(snap, 100)) == []  # z1, z2: preempted twice; z0 would lose 100 s x 4 > 90 s x 4
    snap.running["z1"].preemptions = 1
    ds = cycle(snap, 101)  # z0, z1 have run 101 s x 4, a1 waited 91 s x 4: too costly
    assert preempted(ds) == []
    ds = cycle(snap, 230)  # by now a1 waited 220 s, z1 ran 230 s: still too costly ...
    assert preempted(ds) == []
    snap.running["z1"].checkpoint = 200  # ... also when z1 checkpointed 30 s ago: more than 1/100 of a1's wait
    assert preempted(cycle(snap, 230)) == []
    snap.running["z1"].checkpoint = 228  # ... unless it loses at most 1/100 of it: 2 s x 4 <= 220 s x 4 / 100
    ds = cycle(snap, 230)
    assert preempted(ds) == ["z1"] and admitted(ds) == ["a1"]


# -- rule 6: no blocking, no starvation --------------------------------------------------------------


def test_blocked_job_does_not_block_other_teams():
    snap = make(2, [{"name": "a", "quota": 4, "limit": 50}, {"name": "b", "quota": 4}])
    submit(snap, "a-huge", "a", 4, n=2, t=0)  # over a's borrow limit
    submit(snap, "b1", "b", 4, t=1)
    ds = cycle(snap, 1)
    assert admitted(ds) == ["b1"] and "borrow limit" in waits(ds)["a-huge"]


def test_blocked_shape_does_not_block_smaller_jobs_of_the_same_team():
    snap = make(2, [{"name": "a", "quota": 8}])
    submit(snap, "small0", "a", 1, t=0)
    cycle(snap, 0)
    submit(snap, "gang", "a", 4, n=2, t=1)
    submit(snap, "small1", "a", 1, t=2)
    assert admitted(cycle(snap, 2)) == ["small1"]


def test_large_job_is_not_starved_by_a_stream_of_small_ones():
    snap = make(4, [{"name": "a", "quota": 16}], starvation_guard_seconds=100)
    ends: dict[str, float] = {}
    n = 0
    big_started = None
    submit(snap, "big", "a", 4, n=4, t=5)
    for t in range(0, 2000, 5):  # a 1-accelerator job every 5 s, each runs 30 s: never 4 idle nodes at once
        for jid in [j for j, e in ends.items() if e <= t]:
            snap.finish(jid)
            del ends[jid]
        for _ in range(3):
            submit(snap, f"s{n}", "a", 1, t=t)
            n += 1
        for jid in admitted(cycle(snap, t)):
            if jid == "big":
                big_started = t
                ends[jid] = t + 100
            else:
                ends[jid] = t + 30
        if big_started is not None:
            break
    assert big_started is not None and big_started <= 100 + 30 + 5


# -- rule 7: requeue at the original place, checkpoint-aware victims, min runtime ---------------------


def test_preempted_job_returns_to_its_original_place():
    snap = make(2, [{"name": "a", "quota": 4}, {"name": "b", "quota": 4, "limit": 100}])
    submit(snap, "b1", "b", 4, t=0)
    submit(snap, "b2", "b", 4, t=1)
    assert admitted(cycle(snap, 1)) == ["b1", "b2"]
    submit(snap, "b3", "b", 4, t=2)
    submit(snap, "a1", "a", 4, t=3)
    ds = cycle(snap, 3)
    assert preempted(ds) == ["b2"]
    assert snap.teams["b"].queue.head().id == "b2"  # ahead of b3, which was submitted later
    assert [w.id for w in snap.teams["b"].queue.in_order()] == ["b2", "b3"]


def test_victim_choice_prefers_least_work_lost_since_checkpoint():
    snap = make(4, [{"name": "a", "quota": 12}, {"name": "b", "quota": 4, "limit": 200}])
    submit(snap, "a1", "a", 4, n=2, t=0)
    cycle(snap, 0)
    submit(snap, "b-old", "b", 4, t=0)
    submit(snap, "b-new", "b", 4, t=0)
    cycle(snap, 0)
    snap.running["b-new"].started = 50.0
    snap.running["b-old"].started = 10.0
    snap.running["b-old"].checkpoint = 95.0  # loses 5 s, b-new would lose 50 s
    submit(snap, "a2", "a", 4, t=100)
    assert preempted(cycle(snap, 100)) == ["b-old"]


def test_min_runtime_protects_a_job():
    snap = make(2, [{"name": "a", "quota": 4}, {"name": "b", "quota": 4, "limit": 100}])
    submit(snap, "b1", "b", 4, n=2, t=0, min_runtime=60)
    cycle(snap, 0)
    submit(snap, "a1", "a", 4, t=10)
    ds = cycle(snap, 10)
    assert preempted(ds) == [] and "waiting for reclaim" in waits(ds)["a1"]
    ds = cycle(snap, 61)
    assert preempted(ds) == ["b1"] and admitted(ds) == ["a1"]


# -- rule 8: reasons ---------------------------------------------------------------------------------


def test_no_healthy_node_reason():
    snap = make(2, [{"name": "a", "quota": 8}])
    for name in list(snap.nodes):
        snap.set_schedulable(name, False)
    submit(snap, "j", "a", 4)
    assert waits(cycle(snap))["j"] == "no healthy unit4 node"


def test_wait_reason_reported_once_until_it_changes():
    snap = make(1, [{"name": "a", "quota": 4, "limit": 50}])
    submit(snap, "j", "a", 4, n=2)
    assert "j" in waits(cycle(snap, 0))
    assert waits(cycle(snap, 1)) == {}


def test_a_cycle_serves_every_entitled_job_before_lending():
    # a's idle quota must not be lent in a cycle in which a's own next job claims it back
    snap = make(3, [{"name": "a", "quota": 8}, {"name": "b", "quota": 4, "limit": 100}])
    submit(snap, "b0", "b", 4, t=0)
    cycle(snap, 0)
    submit(snap, "a1", "a", 4, t=1)
    submit(snap, "a2", "a", 4, t=1)
    submit(snap, "b1", "b", 4, t=1)
    ds = cycle(snap, 1)
    assert sorted(admitted(ds)) == ["a1", "a2"] and preempted(ds) == []
    assert "b1" in snap.pending


@pytest.mark.parametrize("blocker", [dict(acc=4, n=5), dict(acc=4, n=3)])  # more nodes than exist; over the cap
def test_a_job_that_can_never_run_does_not_hold_its_team_up(blocker):
    snap = make(4, [{"name": "a", "quota": 4, "limit": 100}, {"name": "l", "quota": 12}],
                starvation_guard_seconds=100)
    submit(snap, "never", "a", t=0, **blocker)
    cycle(snap, 0)
    submit(snap, "small", "a", 4, t=700)
    assert admitted(cycle(snap, 700)) == ["small"]


def test_weight_decides_who_borrows_idle_capacity_first():
    # 12 one-accelerator nodes; l lends 4 (its job ends at t=50); b10 and b90 run 4 nodes each within quota and
    # each wait with a 4-node job that must borrow, b10's since t=10, b90's since t=20. Both borrow nothing
    # before admission (share 0); after admitting its job b90's share is 9x smaller, so b90 goes first.
    spec = parse_spec({
        "cluster": {"name": "t", "instance_groups": [{"name": "g", "instance_type": "unit1", "count": 12}]},
        "instance_types": [{"name": "unit1", "accelerators": 1, "vcpu": 4, "memory_gib": 16}],
        "policy": {"idle_compute_allocation": "FairShare"},
        "teams": [
            {"name": "l", "fair_share_weight": 50, "sharing": {"strategy": "Lend"},
             "quota": [{"instance_type": "unit1", "count": 4}]},
            {"name": "b10", "fair_share_weight": 10, "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 100},
             "quota": [{"instance_type": "unit1", "count": 4}]},
            {"name": "b90", "fair_share_weight": 90, "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 100},
             "quota": [{"instance_type": "unit1", "count": 4}]},
        ],
    })
    snap = snapshot_from_spec(spec)
    one = Res(1, 4000, 16 * 1024)

    def job(jid: str, team: str, t: float) -> None:
        snap.add_pending(Workload(jid, team, "unit1", 4, one, submit=t))

    for team in ("l", "b10", "b90"):
        job(f"{team}-own", team, 0)
    assert sorted(admitted(cycle(snap, 0))) == ["b10-own", "b90-own", "l-own"]
    job("b10-borrow", "b10", 10)
    assert admitted(cycle(snap, 10)) == []
    job("b90-borrow", "b90", 20)
    assert admitted(cycle(snap, 20)) == []
    snap.finish("l-own")
    ds = cycle(snap, 50)
    assert admitted(ds) == ["b90-borrow"] and preempted(ds) == []
    assert "b10-borrow" in snap.pending
