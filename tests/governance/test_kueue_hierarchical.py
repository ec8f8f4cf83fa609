"""Kueue's ``TestHierarchicalPreemptions`` (pkg/scheduler/preemption/preemption_hierarchical_test.go at
``KUEUE_COMMIT``), its 15 cases, as fairpod engine tests over groups (``tests/governance/kueue.py``'s ``tree``: the
root Cohort is the cluster, every other Cohort a group holding its own quota, a ClusterQueue a team of its Cohort's
group; classic preemption with ``policy.hierarchical_reclaim`` and ``reclaim_with_own_jobs``). Each test names the
case and draws Kueue's tree; where fairpod decides otherwise on purpose, the test asserts fairpod's decision and
names the difference in docs/policies.md ("Kueue's tests, translated")."""

from __future__ import annotations

from .kueue import KUEUE_COMMIT, admitted, incoming, tree

assert len(KUEUE_COMMIT) == 40
BORROW0 = {"preempt_to_borrow": "LowerPriority", "preempt_to_borrow_max_priority": 0}  # borrowWithinCohort, 0


def q(cohort: str, quota: int = 0, **more):
    return {"cohort": cohort, "quota": quota, **more}


def run(cohorts, queues, jobs, target, cpu, prio=0, policy=None):
    s = tree(cohorts, queues, policy=policy)
    admitted(s, *jobs)
    return incoming(s, target, cpu, prio=prio)


def test_preempt_with_hierarchical_advantage():
    """TestHierarchicalPreemptions/preempt with hierarchical advantage: R -> C(2) -> q; R -> q_borrowing(0)"""
    got, pre, why = run({"r": (None, 0), "c": ("r", 2)}, {"q": q("c"), "q_borrowing": q("r")},
                        [("admitted2", "q_borrowing", 2, 0)], "q", 2)
    assert got == ["admitted2"] and pre[0].kind == "reclaim" and pre[0].reason == "reclaimed by team q for job in"
    assert why == "admitted, borrowing 2 accelerators from group c"


def test_without_the_policy_a_groups_quota_is_not_taken_back():
    """The case above with ``hierarchical_reclaim`` off (the default): q's job waits, as before."""
    got, pre, why = run({"r": (None, 0), "c": ("r", 2)}, {"q": q("c"), "q_borrowing": q("r")},
                        [("admitted2", "q_borrowing", 2, 0)], "q", 2, policy={"hierarchical_reclaim": False})
    assert got is None and pre == [] and why == "no idle k1 capacity to borrow"


def test_avoid_queues_within_nominal_quota():
    """TestHierarchicalPreemptions/avoid queues within nominal quota: R -> C(2) -> q; R -> q_borrowing(0),
    q_nominal(2)"""
    got, _, _ = run({"r": (None, 0), "c": ("r", 2)}, {"q_nominal": q("r", 2), "q": q("c"), "q_borrowing": q("r")},
                    [("admitted1", "q_nominal", 2, -10), ("admitted2", "q_borrowing", 2, 0)], "q", 2)
    assert got == ["admitted2"]


def test_preempt_multiple_with_hierarchical_advantage():
    """TestHierarchicalPreemptions/preempt multiple with hierarchical advantage: R(0) -> C(2) -> q(0);
    R -> q_borrowing(0)"""
    got, pre, _ = run({"r": (None, 0), "c": ("r", 2)}, {"q": q("c"), "q_borrowing": q("r")},
                      [("admitted1", "q_borrowing", 1, 1), ("admitted2", "q_borrowing", 1, 2)], "q", 2)
    assert got == ["admitted1", "admitted2"] and {p.kind for p in pre} == {"reclaim"}


def test_preempt_in_cohort_and_own_cq():
    """TestHierarchicalPreemptions/preempt in cohort and own CQ: R(0) -> C(3) -> q(0), q_same_cohort(0); q borrows
    within cohort below priority 0"""
    got, pre, _ = run({"r": (None, 0), "c": ("r", 3)}, {"q": q("c"), "q_same_cohort": q("c")},
                      [("admitted_not_preemptible", "q_same_cohort", 1, 1), ("admitted_preemptible", "q_same_cohort", 1, 0),
                       ("admitted_own_queue", "q", 1, -1)], "q", 2, prio=1, policy=BORROW0)
    assert got == ["admitted_own_queue", "admitted_preemptible"] and {p.kind for p in pre} == {"priority"}


def test_prefer_to_preempt_hierarchical_candidate():
    """TestHierarchicalPreemptions/prefer to preempt hierarchical candidate: R(0) -> C(2) -> q(0);
    R -> q_borrowing(0): the group's quota is taken back before q stops its own lower-priority job"""
    got, _, _ = run({"r": (None, 0), "c": ("r", 2)}, {"q": q("c"), "q_borrowing": q("r")},
                    [("admitted_borrowing", "q_borrowing", 1, 1), ("admitted_same_queue", "q", 1, -2)], "q", 1)
    assert got == ["admitted_borrowing"]


def test_forced_to_preempt_priority_candidate():
    """TestHierarchicalPreemptions/forced to preempt priority candidate: R(0) -> C(2) -> q(0), q_same_cohort(0);
    R -> q_nominal(2)"""
    got, pre, _ = run({"r": (None, 0), "c": ("r", 2)}, {"q": q("c"), "q_nominal": q("r", 2), "q_same_cohort": q("c")},
                      [("admitted_nominal", "q_nominal", 2, -10), ("admitted_same_cohort", "q_same_cohort", 2, -1)],
                      "q", 2, policy=BORROW0)
    assert got == ["admitted_same_cohort"] and pre[0].kind == "priority"


def test_incoming_workload_fits_in_cq_nominal_quota():
    """TestHierarchicalPreemptions/incoming workload fits in CQ nominal quota: R(0) -> C(2) -> q(4),
    q_same_cohort(0); R -> q_borrowing(0)"""
    got, pre, why = run({"r": (None, 0), "c": ("r", 2)},
                        {"q": q("c", 4), "q_borrowing": q("r"), "q_same_cohort": q("c")},
                        [("admitted_borrowing", "q_borrowing", 3, 10), ("admitted_same_cohort", "q_same_cohort", 3, 10)],
                        "q", 4)
    assert got == ["admitted_borrowing", "admitted_same_cohort"] and {p.kind for p in pre} == {"reclaim"}
    assert why == "admitted within team q's quota"


def test_preempt_hierarchical_and_priority_candidates_differs():
    """TestHierarchicalPreemptions/preempt hierarchical and priority candidates: R(1) -> C(4) -> q(0),
    q_same_cohort(0); R -> q_borrowing(0). A documented difference (D1): q's reclaimWithinCohort is LowerPriority, so
    Kueue leaves admitted_borrowing_not_preemptible (priority 1) and stops q_same_cohort's job by borrowWithinCohort;
    fairpod takes the group's quota back from any borrower whatever its priority."""
    got, pre, _ = run({"r": (None, 1), "c": ("r", 4)}, {"q": q("c"), "q_borrowing": q("r"), "q_same_cohort": q("c")},
                      [("admitted_borrowing", "q_borrowing", 2, -1),
                       ("admitted_same_cohort_preemptible", "q_same_cohort", 1, -1),
                       ("admitted_borrowing_not_preemptible", "q_borrowing", 2, 1)], "q", 3, policy=BORROW0)
    assert got == ["admitted_borrowing", "admitted_borrowing_not_preemptible"]  # Kueue: + _same_cohort_preemptible
    assert {p.kind for p in pre} == {"reclaim"}


def test_preempt_hierarchical_candidates_and_inside_cq_differs():
    """TestHierarchicalPreemptions/preempt hierarchical candidates and inside CQ: R(1) -> C(4) -> q(0),
    q_same_cohort(0); R -> q_borrowing(0). A documented difference (D1), as above: Kueue stops q's own
    admitted_same_queue_preemptible instead of the priority-1 borrower."""
    got, _, _ = run({"r": (None, 1), "c": ("r", 4)}, {"q": q("c"), "q_borrowing": q("r"), "q_same_cohort": q("c")},
                    [("admitted_borrowing", "q_borrowing", 2, -1), ("admitted_same_queue_preemptible", "q", 1, -1),
                     ("admitted_borrowing_not_preemptible", "q_borrowing", 2, 1)], "q", 3, policy=BORROW0)
    assert got == ["admitted_borrowing", "admitted_borrowing_not_preemptible"]  # Kueue: + _same_queue_preemptible


def test_reclaim_nominal_quota_from_lowest_priority_workload_excluding_non_borrowing():
    """TestHierarchicalPreemptions/reclaim nominal quota from lowest priority workload, excluding non-borrowing:
    R(0) -> C(3) -> q(0); R -> q_borrowing(0), q_nominal(2)"""
    got, _, _ = run({"r": (None, 0), "c": ("r", 3)}, {"q": q("c"), "q_borrowing": q("r"), "q_nominal": q("r", 2)},
                    [("admitted_borrowing_prio_8", "q_borrowing", 1, 8), ("admitted_borrowing_prio_9", "q_borrowing", 1, 9),
                     ("admitted_borrowing_prio_10", "q_borrowing", 1, 9), ("admitted_nominal", "q_nominal", 2, -2)],
                    "q", 1)
    assert got == ["admitted_borrowing_prio_8"]


def test_infeasible_preemption_all_available_workloads_in_pruned_subtrees():
    """TestHierarchicalPreemptions/infeasible preemption all available workloads in pruned subtrees: R -> C(2) ->
    q(0), q_same_cohort(0); R -> C_other(2) -> q_other(0): q_other runs on its own group's quota, which q may not
    take"""
    got, pre, _ = run({"r": (None, 0), "c": ("r", 2), "c_other": ("r", 2)},
                      {"q_other": q("c_other"), "q": q("c"), "q_same_cohort": q("c")},
                      [("admitted_other_1", "q_other", 1, -10), ("admitted_other_2", "q_other", 1, -10),
                       ("admitted_same_cohort", "q_same_cohort", 2, 0)], "q", 2)
    assert got is None and pre == []


def test_hierarchical_preemption_with_multiple_resources_differs():
    """TestHierarchicalPreemptions/hiearchical preemption with multiple resources: R(3 cpu, 0 memory) -> C(4 cpu,
    4Gi) -> q(0), q_same_cohort(0); R -> q_borrowing(0). A translation limit (D6): Kueue's root holds cpu without
    memory, so the incoming job (2 cpu, 1Gi) finds no memory outside C and reclaims C's from q_borrowing; fairpod's
    capacity is nodes, each with all its resources, so the root's capacity has memory and the job starts there."""
    got, pre, why = run({"r": (None, 3), "c": ("r", 4)}, {"q": q("c"), "q_borrowing": q("r"), "q_same_cohort": q("c")},
                        [("admitted_borrowing", "q_borrowing", 3, 0), ("admitted_same_cohort", "q_same_cohort", 1, -2)],
                        "q", 2, prio=-2)
    assert got == [] and pre == [] and why == "admitted, borrowing 2 accelerators from (unallocated)"  # Kueue: reclaim


def test_prefer_to_preempt_evicted_workloads():
    """TestHierarchicalPreemptions/prefer to preempt evicted workloads: R(0) -> C(2) -> q(0), q_same_cohort(0);
    R -> q_borrowing(0). Kueue counts evicted_same_cohort (already evicted, still stopping) as the one victim and
    leaves admitted_borrowing; in fairpod a preempted job leaves the cluster's books at once, so the job starts on
    the room it freed and admitted_borrowing runs on, as in Kueue."""
    got, pre, _ = run({"r": (None, 0), "c": ("r", 2)}, {"q": q("c"), "q_borrowing": q("r"), "q_same_cohort": q("c")},
                      [("admitted_borrowing", "q_borrowing", 1, -10)], "q", 1, policy=BORROW0)
    assert got == [] and pre == []


def test_respect_lending_limits():
    """TestHierarchicalPreemptions/respect lending limits: R(0) -> C(2) -> q(3, lendingLimit 2);
    R -> q_borrowing(0)"""
    got, _, why = run({"r": (None, 0), "c": ("r", 2)}, {"q": q("c", 3, lend=2), "q_borrowing": q("r")},
                      [("admitted_borrowing", "q_borrowing", 4, 0)], "q", 5, prio=-2)
    assert got == ["admitted_borrowing"] and why == "admitted, borrowing 2 accelerators from group c"


def test_reclaim_in_complex_hierarchy():
    """TestHierarchicalPreemptions/reclaim in complex hierarchy: r -> c11 -> c21 -> c31 -> q5, c21 -> c32 -> q4,
    c11 -> c22 -> q3, c11 -> c23 -> q2; r -> c12 -> q1; every Cohort holds 4, every queue 0. q5's job of 7 fits
    c21's 12: it takes back from borrowers outside c21, lowest priority first, each only while its own subtree
    still uses more than its quota (admitted_borrowing_3 is then c23's own)."""
    cohorts = {"r": (None, 0), "c11": ("r", 4), "c12": ("r", 4), "c21": ("c11", 4), "c22": ("c11", 4),
               "c23": ("c11", 4), "c31": ("c21", 4), "c32": ("c21", 4)}
    queues = {"q1": q("c12"), "q2": q("c23"), "q3": q("c22"), "q4": q("c32"), "q5": q("c31")}
    got, _, _ = run(cohorts, queues, [
        ("admitted_borrowing_1", "q1", 4, -6), ("admitted_borrowing_2", "q1", 4, -5), ("admitted_borrowing_3", "q2", 4, -9),
        ("admitted_borrowing_4", "q2", 4, -10), ("admitted_borrowing_5", "q3", 4, -4), ("admitted_borrowing_6", "q3", 3, -3),
        ("admitted_borrowing_7", "q4", 2, 4), ("admitted_borrowing_8", "q4", 3, 2)], "q5", 7, prio=-2)
    assert got == ["admitted_borrowing_1", "admitted_borrowing_4"]
