"""Kueue's ``borrowWithinCohort`` cases (preempting to borrow by priority) as fairpod engine tests, with
``policy.preempt_to_borrow: LowerPriority`` (the translation: tests/governance/kueue.py). Read at ``KUEUE_COMMIT``:
the six ``TestPreemption/use BorrowWithinCohort; …`` cases of pkg/scheduler/preemption/preemption_test.go and
``TestFairPreemptions/workloads under priority threshold not capriciously preempted`` of preemption_fair_test.go
(the hierarchical ones: tests/governance/test_kueue_hierarchical.py).

Kueue's cohort ``with_shared_cq``: a_standard, b_standard and a_best_effort hold 1 cpu each with a borrowingLimit
of 12, b_best_effort 0 cpu with 13, shared 10 (13 in all): each queue may use the whole cohort; all preempt to
borrow jobs of priority at most 0 (``maxPriorityThreshold: 0``); a_standard and a_best_effort never preempt their
own jobs. fairpod's percent borrow limit stops at 500 % (a quota of 1 borrows at most 5), so the cohort is cut to
6 (shared 3, borrowing limits 5 and 6), which keeps what the cases turn on: each queue may still use the whole
cohort; each amount that stood for "most of the cohort" is cut with it (each test says how)."""

from __future__ import annotations

import pytest

from fairpod.model.spec import parse_spec

from .kueue import KUEUE_COMMIT, admitted, cohort, incoming, victims

assert len(KUEUE_COMMIT) == 40
BORROW = {"preempt_to_borrow": "LowerPriority", "preempt_to_borrow_max_priority": 0}


def shared(policy: dict | None = None):
    """Kueue's cohort ``with_shared_cq``, cut to 6 (module docstring)."""
    return cohort({"a_standard": {"quota": 1, "borrow": 5, "within": "Never"},
                   "b_standard": {"quota": 1, "borrow": 5},
                   "a_best_effort": {"quota": 1, "borrow": 5, "within": "Never"},
                   "b_best_effort": {"quota": 0, "borrow": 6, "within": "Never"},
                   "shared": {"quota": 3, "within": "Never"}}, policy=BORROW if policy is None else policy)


def test_allow_preempting_a_lower_priority_workload_from_another_cluster_queue_while_borrowing():
    """TestPreemption/use BorrowWithinCohort; allow preempting a lower-priority workload from another ClusterQueue
    while borrowing (a_best_effort_low 10 -> 5, the incoming 10 -> 5)."""
    s = shared()
    admitted(s, ("a_best_effort_low", "a_best_effort", 5, -1), ("b_best_effort_low", "b_best_effort", 1, -1))
    got, pre, why = incoming(s, "a_standard", 5)
    assert got == ["a_best_effort_low"] and pre[0].kind == "priority"
    assert pre[0].reason == ("preempted by higher-priority job in of team a-standard, which borrows "
                             "(policy.preempt_to_borrow)")
    assert why.startswith("admitted, borrowing 4 accelerators from ")


def test_without_the_policy_a_borrowing_job_stops_no_lower_priority_borrower():
    """The case above with ``preempt_to_borrow`` off (the default): the job waits, as before (docs/policies.md,
    D3)."""
    s = shared(policy={})
    admitted(s, ("a_best_effort_low", "a_best_effort", 5, -1), ("b_best_effort_low", "b_best_effort", 1, -1))
    got, pre, why = incoming(s, "a_standard", 5)
    assert got is None and pre == [] and why == "no idle k1 capacity to borrow"


def test_dont_allow_preempting_above_max_priority_threshold_if_borrowing_is_required_after_the_preemption():
    """TestPreemption/use BorrowWithinCohort; don't allow preempting a lower-priority workload with priority above
    MaxPriorityThreshold, if borrowing is required even after the preemption (b_standard 10 -> 5, the incoming 10
    -> 5)"""
    s = shared()
    admitted(s, ("b_standard", "b_standard", 5, 1))
    got, pre, why = incoming(s, "a_standard", 5, prio=2)
    assert got is None and pre == [] and why == "no idle k1 capacity to borrow"


def test_allow_preempting_above_max_priority_threshold_if_borrowing_is_not_required_after_the_preemption():
    """TestPreemption/use BorrowWithinCohort; allow preempting a lower-priority workload with priority above
    MaxPriorityThreshold, if borrowing is not required after the preemption (b_standard 13 -> 6): a reclaim."""
    s = shared()
    admitted(s, ("b_standard", "b_standard", 6, 1))
    got, pre, _ = incoming(s, "a_standard", 1, prio=2)
    assert got == ["b_standard"] and pre[0].kind == "reclaim"


def test_dont_allow_for_preemption_of_lower_priority_workload_from_the_same_cluster_queue():
    """TestPreemption/use BorrowWithinCohort; don't allow for preemption of lower-priority workload from the same
    ClusterQueue (a_standard 13 -> 6; a_standard never preempts its own jobs)"""
    s = shared()
    admitted(s, ("a_standard", "a_standard", 6, 1))
    got, pre, _ = incoming(s, "a_standard", 1, prio=2)
    assert got is None and pre == []


def test_only_preempt_from_cq_if_no_workloads_below_threshold_and_already_above_nominal():
    """TestPreemption/use BorrowWithinCohort; only preempt from CQ if no workloads below threshold and already
    above nominal (a_standard_1 10 -> 3): a_standard's jobs are above the threshold, so b_standard stops its own."""
    s = shared()
    admitted(s, ("a_standard_1", "a_standard", 3, 1), ("a_standard_2", "a_standard", 1, 1),
             ("b_standard_1", "b_standard", 1, 1), ("b_standard_2", "b_standard", 1, 2))
    got, pre, _ = incoming(s, "b_standard", 1, prio=3)
    assert got == ["b_standard_1"] and pre[0].kind == "priority"


def test_preempt_from_cq_and_from_other_cqs_with_workloads_below_threshold():
    """TestPreemption/use BorrowWithinCohort; preempt from CQ and from other CQs with workloads below threshold
    (b_standard_high 10 -> 3): a_best_effort_lower goes (a_best_effort_low is then a_best_effort's quota, no longer
    borrowed), and b_standard's own b_standard_mid."""
    s = shared()
    admitted(s, ("b_standard_high", "b_standard", 3, 2), ("b_standard_mid", "b_standard", 1, 1),
             ("a_best_effort_low", "a_best_effort", 1, -1), ("a_best_effort_lower", "a_best_effort", 1, -2))
    got, pre, _ = incoming(s, "b_standard", 2, prio=2)
    assert got == ["a_best_effort_lower", "b_standard_mid"]
    assert {p.job: p.reason.endswith("(policy.preempt_to_borrow)") for p in pre} == {
        "a_best_effort_lower": True, "b_standard_mid": False}


def test_no_threshold_takes_any_lower_priority_borrower():
    """Without ``preempt_to_borrow_max_priority`` any lower priority may go: b_standard (priority 1) is stopped for
    a_standard's job of priority 2 that must borrow (with the threshold 0 above it waits)."""
    s = shared(policy={"preempt_to_borrow": "LowerPriority"})
    admitted(s, ("b_standard", "b_standard", 5, 1))
    assert victims(s, "a_standard", 5, prio=2) == ["b_standard"]


def test_workloads_under_priority_threshold_not_capriciously_preempted():
    """TestFairPreemptions/workloads under priority threshold not capriciously preempted: under fair sharing
    borrowWithinCohort does not apply (Kueue's docs: classic preemption only); fair share alone decides, and a's job
    of 2 waits. fairpod refuses the setting under FairShare (below), so the case runs without it."""
    s = cohort({"a": {"quota": 3}, "b": {"quota": 3}, "c": {"quota": 3}, "preemptible": {"quota": 0, "borrow": 9}},
               fair=True)
    admitted(s, *[(n, "a", 1) for n in ("a1", "a2", "a3")], *[(n, "b", 1) for n in ("b1", "b2", "b3")],
             *[(f"preemptible{i}", "preemptible", 1, -3) for i in (1, 2, 3)])
    assert victims(s, "a", 2) is None


def test_the_setting_is_refused_under_fair_share():
    with pytest.raises(ValueError, match="preempt_to_borrow: LowerPriority needs idle_compute_allocation: "
                                         "FirstComeFirstServe"):
        parse_spec(dict(cluster=dict(name="c", instance_groups=[]), teams=[],  # (no literal: not a corpus spec)
                        policy=dict(preempt_to_borrow="LowerPriority")))
