"""Kueue's ``TestFairPreemptions`` (pkg/scheduler/preemption/preemption_fair_test.go at ``KUEUE_COMMIT``), case by
case, as fairpod engine tests under FairShare (the translation: tests/governance/kueue.py). Kueue's cluster queues
a, b and c have 3 cpu each and weight 1; the incoming workload has priority 0 unless said. Where fairpod decides
otherwise on purpose, the test asserts fairpod's decision and names the difference in docs/policies.md ("Kueue's
tests, translated")."""

from __future__ import annotations

from .kueue import admitted, cohort, incoming, victims


def abc(scale: int = 1, **weights: int):
    return cohort({n: {"quota": 3, "weight": weights.get(n, 1)} for n in "abc"}, fair=True, scale=scale)


def units(cq: str, *names: str) -> list[tuple[str, str, float]]:
    return [(n, cq, 1) for n in names]


def test_reclaim_nominal_from_user_using_the_most():
    """TestFairPreemptions/reclaim nominal from user using the most"""
    s = abc()
    admitted(s, *units("a", "a1", "a2", "a3"), *units("b", "b1", "b2", "b3", "b4", "b5"), *units("c", "c1"))
    got, pre, _ = incoming(s, "c", 1)
    assert got == ["b1"] and pre[0].kind == "reclaim"


def test_can_reclaim_from_queue_using_less():
    """TestFairPreemptions/can reclaim from queue using less, if taking the latest workload from user using the most
    isn't enough"""
    s = abc()
    admitted(s, ("a1", "a", 3), ("a2", "a", 1), ("b1", "b", 2), ("b2", "b", 3))
    assert victims(s, "c", 3) == ["a1"]


def test_reclaim_borrowable_quota_from_user_using_the_most():
    """TestFairPreemptions/reclaim borrowable quota from user using the most"""
    s = abc()
    admitted(s, *units("a", "a1", "a2", "a3"), *units("b", "b1", "b2", "b3", "b4", "b5"), *units("c", "c1"))
    got, pre, _ = incoming(s, "a", 1)
    assert got == ["b1"] and pre[0].kind == "fair-share"


def test_preempt_one_from_each_cq_borrowing_differs():
    """TestFairPreemptions/preempt one from each CQ borrowing. A documented difference (D4): Kueue reclaims from the
    borrower with the largest share first, one job from a and one from b; fairpod's reclaim takes borrowed jobs by
    priority, then least lost work, then the most recently started, whoever's they are, and stops a1 and a2 (as many
    accelerators; a is still borrowing after a1)."""
    s = abc(scale=2)
    admitted(s, ("a1", "a", 0.5), ("a2", "a", 0.5), ("a3", "a", 3), ("b1", "b", 0.5), ("b2", "b", 0.5),
             ("b3", "b", 3))
    got, pre, _ = incoming(s, "c", 2)
    assert got == ["a1", "a2"] and {p.kind for p in pre} == {"reclaim"}  # Kueue: a1, b1


def test_cant_preempt_when_everyone_under_nominal():
    """TestFairPreemptions/can't preempt when everyone under nominal"""
    s = abc()
    admitted(s, *units("a", "a1", "a2", "a3"), *units("b", "b1", "b2", "b3"), *units("c", "c1", "c2", "c3"))
    assert victims(s, "c", 1) is None


def test_cant_preempt_when_it_would_switch_the_imbalance():
    """TestFairPreemptions/can't preempt when it would switch the imbalance"""
    s = abc()
    admitted(s, *units("a", "a1", "a2", "a3"), *units("b", "b1", "b2", "b3", "b4", "b5"))
    assert victims(s, "a", 2) is None


def test_can_preempt_lower_priority_workloads_from_same_cq():
    """TestFairPreemptions/can preempt lower priority workloads from same CQ"""
    s = abc()
    admitted(s, ("a1_low", "a", 1, -1), ("a2_low", "a", 1, -1), *units("a", "a3", "a4"),
             *units("b", "b1", "b2", "b3", "b4", "b5"))
    got, pre, _ = incoming(s, "a", 2)
    assert got == ["a1_low", "a2_low"] and {p.kind for p in pre} == {"priority"}


def test_can_preempt_a_combination_of_same_cq_and_highest_user():
    """TestFairPreemptions/can preempt a combination of same CQ and highest user"""
    s = abc()
    admitted(s, ("a_low", "a", 1, -1), *units("a", "a2", "a3"), *units("b", "b1", "b2", "b3", "b4", "b5", "b6"))
    got, pre, _ = incoming(s, "a", 2)
    assert got == ["a_low", "b1"] and {p.job: p.kind for p in pre} == {"a_low": "priority", "b1": "fair-share"}


def test_preempt_huge_workload_if_there_is_no_other_option():
    """TestFairPreemptions/preempt huge workload if there is no other option, as long as the target CQ gets a lower
    share"""
    s = abc()
    admitted(s, ("b1", "b", 9))
    assert victims(s, "a", 2) == ["b1"]


def test_cant_preempt_huge_workload_if_the_incoming_is_also_huge():
    """TestFairPreemptions/can't preempt huge workload if the incoming is also huge"""
    s = abc()
    admitted(s, ("a1", "a", 2), ("b1", "b", 7))
    assert victims(s, "a", 5) is None


def test_cant_preempt_2_smaller_workloads_if_the_incoming_is_huge():
    """TestFairPreemptions/can't preempt 2 smaller workloads if the incoming is huge"""
    s = abc()
    admitted(s, ("b1", "b", 2), ("b2", "b", 2), ("b3", "b", 3))
    assert victims(s, "a", 6) is None


def test_preempt_from_target_and_others_even_if_over_nominal_differs():
    """TestFairPreemptions/preempt from target and others even if over nominal. A documented difference (D5): Kueue's
    second strategy (LessThanInitialShare, rule S2-b) lets a stop b1 because a's share after admission is below b's
    share *before* it; fairpod allows a fair-share preemption only while the preemptor's share after admission stays
    at or below the victim team's share *after* the removal (LessThanOrEqualToFinalShare), so that no two jobs preempt
    each other back and forth. a waits."""
    s = abc()
    admitted(s, ("a1_low", "a", 2, -1), ("a2_low", "a", 1, -1), ("b1", "b", 3), ("b2", "b", 3))
    assert victims(s, "a", 4) is None  # Kueue: a1_low, b1


def test_prefer_to_preempt_workloads_that_dont_make_the_target_cq_have_the_biggest_share():
    """TestFairPreemptions/prefer to preempt workloads that don't make the target CQ have the biggest share"""
    s = abc(scale=2)
    admitted(s, ("b1", "b", 2), ("b2", "b", 1), ("b3", "b", 2), ("c1", "c", 1))
    got, pre, _ = incoming(s, "a", 3.5)
    assert got == ["b2"] and pre[0].kind == "fair-share"


def test_preempt_from_different_cluster_queues_if_the_end_result_has_a_smaller_max_share_differs():
    """TestFairPreemptions/preempt from different cluster queues if the end result has a smaller max share. A
    documented difference (D5, rule S2-b): after b1 and c1 go, b and c borrow nothing, below a's share; fairpod does
    not stop them and a waits."""
    s = abc(scale=2)
    admitted(s, ("b1", "b", 2), ("b2", "b", 2.5), ("c1", "c", 2), ("c2", "c", 2.5))
    assert victims(s, "a", 3.5) is None  # Kueue: b1, c1


def test_scenario_above_does_not_flap():
    """TestFairPreemptions/scenario above does not flap"""
    s = abc(scale=2)
    admitted(s, ("a1", "a", 3.5), ("b2", "b", 2.5), ("c2", "c", 2.5))
    assert victims(s, "b", 2) is None


def test_cannot_preempt_if_it_would_make_the_candidate_cq_go_under_nominal():
    """TestFairPreemptions/cannot preempt if it would make the candidate CQ go under nominal after preempting one
    element"""
    s = abc()
    admitted(s, ("b1", "b", 3), ("b2", "b", 3), ("c1", "c", 3))
    assert victims(s, "a", 4) is None


def test_preempt_workload_that_doesnt_transfer_the_imbalance_even_if_high_priority():
    """TestFairPreemptions/preempt workload that doesn't transfer the imbalance, even if high priority (strategy
    LessThanOrEqualToFinalShare, fairpod's one)"""
    s = abc()
    admitted(s, ("a1", "a", 3), ("b_low", "b", 5, 0), ("b_high", "b", 1, 1))
    got, pre, _ = incoming(s, "a", 1)
    assert got == ["b_high"] and pre[0].kind == "fair-share"


def test_cq_with_higher_weight_can_preempt_more():
    """TestFairPreemptions/CQ with higher weight can preempt more"""
    s = abc(a=2)
    admitted(s, *units("a", "a1", "a2", "a3"), *units("b", *(f"b{i}" for i in range(1, 7))))
    got, pre, _ = incoming(s, "a", 2)
    assert got == ["b1", "b2"] and {p.kind for p in pre} == {"fair-share"}


def test_can_preempt_anything_borrowing_from_cq_with_0_weight_differs():
    """TestFairPreemptions/can preempt anything borrowing from CQ with 0 weight. A documented difference (D5): b (weight
    0) has an infinite share while it borrows, so fairpod may stop b1 and b2, but the third job would leave b
    borrowing nothing (share 0, below a's): only Kueue's rule S2-b (b's share before, infinite) allows it; a needs
    all three and waits."""
    s = cohort({"a": {"quota": 3}, "b": {"quota": 3, "weight": 0}, "c": {"quota": 3}}, fair=True)
    admitted(s, *units("a", "a1", "a2", "a3"), *units("b", *(f"b{i}" for i in range(1, 7))))
    assert victims(s, "a", 3) is None  # Kueue: b1, b2, b3


def test_cant_preempt_nominal_from_cq_with_0_weight():
    """TestFairPreemptions/can't preempt nominal from CQ with 0 weight"""
    s = cohort({"a": {"quota": 3}, "b": {"quota": 3, "weight": 0}}, fair=True)
    admitted(s, *units("a", "a1", "a2", "a3"), *units("b", "b1", "b2", "b3"))
    assert victims(s, "a", 1) is None


def test_can_preempt_within_cluster_queue_when_no_cohort():
    """TestFairPreemptions/can preempt within cluster queue when no cohort"""
    s = cohort({"a": {"quota": 1}}, fair=True)
    admitted(s, ("a1", "a", 1))
    got, pre, _ = incoming(s, "a", 1, prio=1000)
    assert got == ["a1"] and pre[0].kind == "priority"
