"""Kueue's ``TestPreemption`` (pkg/scheduler/preemption/preemption_test.go at ``KUEUE_COMMIT``), case by case, as
fairpod engine tests (the translation: tests/governance/kueue.py). Each test's docstring names the Kueue case; where
fairpod decides otherwise on purpose, the test asserts fairpod's decision and names the section of docs/policies.md
("Kueue's tests, translated") that says why."""

from __future__ import annotations

from fairpod.governance import schedule
from fairpod.governance.decisions import Preempt

from .kueue import KUEUE_COMMIT, START, WAITED, admitted, cohort, incoming, victims

assert len(KUEUE_COMMIT) == 40


def standalone():
    """Kueue's ClusterQueue ``standalone`` (no cohort): 6 cpu, withinClusterQueue LowerPriority."""
    return cohort({"standalone": {"quota": 6}})


def c1c2():
    """Cohort ``cohort``: c1 and c2, 6 cpu each with a borrowingLimit of 6; c1 preempts lower-priority jobs of its
    own, c2 never does (withinClusterQueue Never)."""
    return cohort({"c1": {"quota": 6, "borrow": 6}, "c2": {"quota": 6, "borrow": 6, "within": "Never"}})


def lend12():
    """Cohort ``cohort-lend``: lend1 (6 cpu, lendingLimit 4) and lend2 (6 cpu, lendingLimit 2)."""
    return cohort({"lend1": {"quota": 6, "lend": 4}, "lend2": {"quota": 6, "lend": 2}})


def abc():
    """Cohort ``cohort-three``: a, b and c with 2 cpu each; only a preempts (within LowerPriority, reclaim Any)."""
    return cohort({"a": {"quota": 2}, "b": {"quota": 2, "within": "Never"}, "c": {"quota": 2, "within": "Never"}})


def test_preempt_lowest_priority():
    """TestPreemption/preempt lowest priority"""
    s = standalone()
    admitted(s, ("low", "standalone", 2, -1), ("mid", "standalone", 2), ("high", "standalone", 2, 1))
    assert victims(s, "standalone", 2, prio=1) == ["low"]


def test_preempt_multiple():
    """TestPreemption/preempt multiple"""
    s = standalone()
    admitted(s, ("low", "standalone", 2, -1), ("mid", "standalone", 2), ("high", "standalone", 2, 1))
    assert victims(s, "standalone", 3, prio=1) == ["low", "mid"]


def test_no_preemption_for_low_priority():
    """TestPreemption/no preemption for low priority"""
    s = standalone()
    admitted(s, ("low", "standalone", 3, -1), ("mid", "standalone", 3))
    assert victims(s, "standalone", 1, prio=-1) is None


def test_not_enough_low_priority_workloads():
    """TestPreemption/not enough low priority workloads"""
    s = standalone()
    admitted(s, ("low", "standalone", 3, -1), ("mid", "standalone", 3))
    assert victims(s, "standalone", 4) is None


def test_some_free_quota_preempt_low_priority():
    """TestPreemption/some free quota, preempt low priority"""
    s = standalone()
    admitted(s, ("low", "standalone", 1, -1), ("mid", "standalone", 1), ("high", "standalone", 3, 1))
    assert victims(s, "standalone", 2, prio=1) == ["low"]


def test_minimal_set_excludes_low_priority():
    """TestPreemption/minimal set excludes low priority"""
    s = standalone()
    admitted(s, ("low", "standalone", 1, -1), ("mid", "standalone", 2), ("high", "standalone", 3, 1))
    assert victims(s, "standalone", 2, prio=1) == ["mid"]


def test_reclaim_quota_from_borrower():
    """TestPreemption/reclaim quota from borrower"""
    s = c1c2()
    admitted(s, ("c1-low", "c1", 3, -1), ("c2-mid", "c2", 3), ("c2-high", "c2", 6, 1))
    got, pre, _ = incoming(s, "c1", 3, prio=1)
    assert got == ["c2-mid"] and pre[0].kind == "reclaim"


def test_no_workloads_borrowing():
    """TestPreemption/no workloads borrowing: nothing is preempted (fairpod starts it by borrowing c2's idle quota,
    which Kueue's preemption test, asked only for victims, does not look at)."""
    s = c1c2()
    admitted(s, ("c1-high", "c1", 4, 1), ("c2-low-1", "c2", 4, -1))
    got, pre, why = incoming(s, "c1", 4, prio=1)
    assert pre == [] and got == [] and "borrowing 2" in why


def test_not_enough_workloads_borrowing():
    """TestPreemption/not enough workloads borrowing"""
    s = c1c2()
    admitted(s, ("c1-high", "c1", 4, 1), ("c2-low-1", "c2", 4, -1), ("c2-low-2", "c2", 4, -1))
    got, pre, why = incoming(s, "c1", 4, prio=1)
    assert got is None and pre == [] and why == "no idle k1 capacity to borrow"


def test_preempting_locally_and_borrowing_same_resource_in_cohort():
    """TestPreemption/preempting locally and borrowing same resource in cohort"""
    s = c1c2()
    admitted(s, ("c1-med", "c1", 4), ("c1-low", "c1", 4, -1), ("c2-low-1", "c2", 4, -1))
    got, pre, why = incoming(s, "c1", 4, prio=1)
    assert got == ["c1-low"] and pre[0].kind == "priority" and "borrowing 2" in why


def test_preempting_locally_and_borrowing_same_resource_no_borrowing_limit():
    """TestPreemption/preempting locally and borrowing same resource in cohort; no borrowing limit in the cohort"""
    s = cohort({"d1": {"quota": 6}, "d2": {"quota": 6, "within": "Never"}})
    admitted(s, ("d1-med", "d1", 4), ("d1-low", "d1", 4, -1), ("d2-low-1", "d2", 4, -1))
    assert victims(s, "d1", 4, prio=1) == ["d1-low"]


def test_preempting_locally_and_not_borrowing_same_resource_in_1_queue_cohort():
    """TestPreemption/preempting locally and not borrowing same resource in 1-queue cohort"""
    s = cohort({"l1": {"quota": 6, "borrow": 6}})
    admitted(s, ("l1-med", "l1", 4), ("l1-low", "l1", 2, -1))
    assert victims(s, "l1", 4, prio=1) == ["l1-med"]


def test_do_not_reclaim_borrowed_quota_from_same_priority_differs():
    """TestPreemption/do not reclaim borrowed quota from same priority for withinCohort=ReclaimFromLowerPriority.
    A documented difference (docs/policies.md, "Kueue's tests, translated", D1): fairpod's reclaim takes lent
    capacity back from any borrower whatever its priority; Kueue's ReclaimWithinCohort LowerPriority does not."""
    s = c1c2()
    admitted(s, ("c1", "c1", 2), ("c2-1", "c2", 4), ("c2-2", "c2", 4))
    got, pre, _ = incoming(s, "c1", 4)
    assert got == ["c2-1"] and pre[0].kind == "reclaim"  # Kueue: no victim


def test_reclaim_borrowed_quota_from_same_priority_for_reclaim_from_any():
    """TestPreemption/reclaim borrowed quota from same priority for withinCohort=ReclaimFromAny"""
    s = c1c2()
    admitted(s, ("c1-1", "c1", 4), ("c1-2", "c1", 4, 1), ("c2", "c2", 2))
    assert victims(s, "c2", 4) == ["c1-1"]


def test_preempt_from_all_cluster_queues_in_cohort():
    """TestPreemption/preempt from all ClusterQueues in cohort: c1 (5 of 6 used) fits its quota once its own c1-low
    stops, and c2's c2-low gives back what c2 borrowed; both go at once (fairpod waited before, saying there was no
    idle capacity to borrow)."""
    s = c1c2()
    admitted(s, ("c1-low", "c1", 3, -1), ("c1-mid", "c1", 2), ("c2-low", "c2", 3, -1), ("c2-mid", "c2", 4))
    got, pre, why = incoming(s, "c1", 4)
    assert got == ["c1-low", "c2-low"]
    assert {p.job: p.kind for p in pre} == {"c1-low": "priority", "c2-low": "reclaim"}
    assert why == "admitted within team c1's quota"
    assert s.teams["c1"].u("k1")[0] == 6 and s.teams["c2"].u("k1")[0] == 4


def test_cant_preempt_workloads_in_cluster_queue_for_within_cluster_queue_never():
    """TestPreemption/can't preempt workloads in ClusterQueue for withinClusterQueue=Never (fairpod: no victim; it
    starts by borrowing 1 of c1's idle quota, which Kueue's test, asked only for victims, does not look at)."""
    s = c1c2()
    admitted(s, ("c2-low", "c2", 3, -1))
    got, pre, _ = incoming(s, "c2", 4, prio=1)
    assert pre == [] and got == []


def test_preempt_newer_workloads_with_the_same_priority():
    """TestPreemption/preempt newer workloads with the same priority (withinClusterQueue LowerOrNewerEqualPriority:
    ``preempt_team_tasks: LowerOrNewerEqualPriority``, opt-in; wl2 and wl3 were created 15 s after the incoming
    workload, wl2 admitted last)."""
    s = cohort({"preventStarvation": {"quota": 6, "within": "LowerOrNewerEqualPriority"}})
    admitted(s, ("wl1", "preventStarvation", 2, 2), ("wl2", "preventStarvation", 2, 1),
             ("wl3", "preventStarvation", 2, 1))
    for j in ("wl2", "wl3"):
        s.running[j].submit = START - WAITED + 15
    s.running["wl2"].started = START + 1
    got, pre, _ = incoming(s, "preventStarvation", 2, prio=1)
    assert got == ["wl2"] and pre[0].kind == "priority"


def test_with_lower_priority_a_team_never_preempts_newer_jobs_of_the_same_priority():
    """The case above with ``preempt_team_tasks: LowerPriority`` (the default): the job waits (D2)."""
    s = cohort({"preventStarvation": {"quota": 6}})
    admitted(s, ("wl1", "preventStarvation", 2, 2), ("wl2", "preventStarvation", 2, 1),
             ("wl3", "preventStarvation", 2, 1))
    for j in ("wl2", "wl3"):
        s.running[j].submit = START - WAITED + 15
    assert victims(s, "preventStarvation", 2, prio=1) is None


def test_reclaim_quota_from_lender():
    """TestPreemption/reclaim quota from lender"""
    s = lend12()
    admitted(s, ("lend1-low", "lend1", 3, -1), ("lend2-mid", "lend2", 3), ("lend2-high", "lend2", 4, 1))
    assert victims(s, "lend1", 3, prio=1) == ["lend2-mid"]


def test_preempt_from_all_cluster_queues_in_cohort_lend():
    """TestPreemption/preempt from all ClusterQueues in cohort-lend"""
    s = lend12()
    admitted(s, ("lend1-low", "lend1", 3, -1), ("lend1-mid", "lend1", 2), ("lend2-low", "lend2", 3, -1),
             ("lend2-mid", "lend2", 4))
    assert victims(s, "lend1", 4) == ["lend1-low", "lend2-low"]


def test_cannot_preempt_from_other_cluster_queues_if_exceeds_requestable_quota_including_lending_limit():
    """TestPreemption/cannot preempt from other ClusterQueues if exceeds requestable quota including lending limit"""
    s = lend12()
    admitted(s, ("lend2-low", "lend2", 10, -1))
    got, pre, why = incoming(s, "lend1", 9)
    assert got is None and pre == [] and why == "no idle k1 capacity to borrow"


def test_preemptions_from_cq_when_target_queue_is_exhausted_for_the_single_requested_resource():
    """TestPreemption/preemptions from cq when target queue is exhausted for the single requested resource"""
    s = abc()
    admitted(s, ("a1", "a", 1, -2), ("a2", "a", 1, -2), ("a3", "a", 1, -1), ("b1", "b", 1), ("b2", "b", 1),
             ("b3", "b", 1))
    assert victims(s, "a", 2) == ["a1", "a2"]


def test_allow_preemption_from_other_cluster_queues_if_target_cq_is_not_exhausted():
    """TestPreemption/allow preemption from other cluster queues if target cq is not exhausted for the requested
    resource: a's own a1 and b's borrowed b5 together (rules 3 and 4 combined)."""
    s = abc()
    admitted(s, ("a1", "a", 1, -1), ("b1", "b", 1), ("b2", "b", 1), ("b3", "b", 1), ("b4", "b", 1),
             ("b5", "b", 1, -1))
    got, pre, _ = incoming(s, "a", 2)
    assert got == ["a1", "b5"] and {p.job: p.kind for p in pre} == {"a1": "priority", "b5": "reclaim"}


def test_preempt_from_all_cluster_queues_in_cohort_waits_with_the_right_reason():
    """TestPreemption/preempt from all ClusterQueues in cohort, with c2's jobs inside their minimum run time: c1's job
    cannot go yet, and its reason says why (before: "no idle capacity to borrow", though c1 is below its quota and c2
    borrows from it). Once the minimum run time is over it goes, as Kueue decides."""
    s = c1c2()
    admitted(s, ("c1-low", "c1", 3, -1), ("c1-mid", "c1", 2), ("c2-low", "c2", 3, -1), ("c2-mid", "c2", 4))
    for j in ("c2-low", "c2-mid"):
        s.running[j].min_runtime = 600.0
    got, pre, why = incoming(s, "c1", 4)
    assert got is None and pre == []
    assert why == ("waiting for reclaim: the job fits team c1's k1 quota once the team's lower-priority jobs stop, "
                   "but the rest is held by other teams' borrowed jobs that cannot be preempted yet")
    s.now += 600.0
    assert sorted(d.job for d in schedule(s) if isinstance(d, Preempt)) == ["c1-low", "c2-low"]


def test_without_the_policy_a_team_does_not_reclaim_and_stop_its_own_jobs_together():
    """The same case with ``policy.reclaim_with_own_jobs`` off (the default): c1's job waits, as before, and its
    reason says why (before: only "no idle k1 capacity to borrow", though c1 is below its quota and c2 borrows from
    it)."""
    s = c1c2()
    s.reclaim_with_own = False
    admitted(s, ("c1-low", "c1", 3, -1), ("c1-mid", "c1", 2), ("c2-low", "c2", 3, -1), ("c2-mid", "c2", 4))
    got, pre, why = incoming(s, "c1", 4)
    assert got is None and pre == []
    assert why == ("no idle k1 capacity to borrow: team c1 is below its k1 quota and other teams borrow from it; the "
                   "job fits within that quota once the team's lower-priority jobs stop, and fairpod stops them "
                   "together with a reclaim only with policy.reclaim_with_own_jobs: true")
