"""The hierarchical cases of Kueue's ``TestScheduleForFairSharing`` (pkg/scheduler/scheduler_fs_test.go at
``KUEUE_COMMIT``): fair sharing with nested Cohorts, as fairpod engine tests over groups under FairShare (the tree as
``tests/governance/kueue.py``'s ``tree`` reads it; a Cohort without quota in its subtree borrows up to the cluster, as
Kueue's does without a borrowingLimit). Kueue's test admits the pending workloads of one scheduling cycle; here one
cycle of the engine. All four differ from Kueue on purpose; each test asserts fairpod's decision and names the
difference in docs/policies.md ("Kueue's tests, translated"). Not translated: "hierarchical nominal-first per-flavor
ignores cross-flavor borrowing" (two flavors of one node type, which fairpod's instance types do not split)."""

from __future__ import annotations

from fairpod.governance import Workload, schedule
from fairpod.governance.decisions import Admit, Preempt
from fairpod.model.resources import Res

from .kueue import KT, START, admitted, team, tree

FAIR = {"idle_compute_allocation": "FairShare", "hierarchical_reclaim": False}


def q(cohort: str, quota: int = 0):
    return {"cohort": cohort, "quota": quota}


def cycle(cohorts, queues, running, pending):
    s = tree(cohorts, queues, policy=FAIR)
    admitted(s, *running)
    for name, cq, cpu in pending:
        s.add_pending(Workload(name, team(cq), KT, cpu, Res(1, 4000, 16384), submit=START - 60))
    ds = schedule(s)
    return (sorted(d.job for d in ds if isinstance(d, Admit)), sorted(d.job for d in ds if isinstance(d, Preempt)))


def test_hierarchical_nominal_first_prefers_non_borrowing_subtree_differs():
    """TestScheduleForFairSharing/with fair sharing: hierarchical nominal-first prefers non-borrowing subtree: ROOT ->
    COHORT-A(10) -> cq-a(0); ROOT -> COHORT-B -> cq-b(5), cq-c(0) running c0 (10). Kueue admits wl-a (COHORT-A does
    not borrow) and leaves wl-b (COHORT-B borrows). D7: fairpod admits a job within its *team's* quota first (wl-b,
    on the 5 idle), then wl-a by fair share, stopping c0 (its reclaim and fair share always act; Kueue's queues
    here preempt nothing)."""
    got = cycle({"root": (None, 0), "cohort-a": ("root", 10), "cohort-b": ("root", 0)},
                {"cq-a": q("cohort-a"), "cq-b": q("cohort-b", 5), "cq-c": q("cohort-b")},
                [("c0", "cq-c", 10)], [("wl-a", "cq-a", 5), ("wl-b", "cq-b", 5)])
    assert got == (["wl-a", "wl-b"], ["c0"])  # Kueue: (["wl-a"], [])


def test_hierarchical_nominal_first_with_deeper_nesting_differs():
    """TestScheduleForFairSharing/with fair sharing: hierarchical nominal-first with deeper nesting: ROOT ->
    COHORT-A -> SUB-A(10) -> cq-a(0); ROOT -> COHORT-B -> cq-b(5), cq-c(0) running c0 (10). D7, as above."""
    got = cycle({"root": (None, 0), "cohort-a": ("root", 0), "sub-a": ("cohort-a", 10), "cohort-b": ("root", 0)},
                {"cq-a": q("sub-a"), "cq-b": q("cohort-b", 5), "cq-c": q("cohort-b")},
                [("c0", "cq-c", 10)], [("wl-a", "cq-a", 5), ("wl-b", "cq-b", 5)])
    assert got == (["wl-a", "wl-b"], ["c0"])  # Kueue: (["wl-a"], [])


def test_hierarchical_nominal_first_with_mixed_cq_and_cohort_quotas_differs():
    """TestScheduleForFairSharing/with fair sharing: hierarchical nominal-first with mixed CQ and cohort quotas:
    ROOT -> COHORT-A(10) -> cq-a1(5), cq-a2(3) running 6; ROOT -> COHORT-B(10) -> cq-b(5), cq-c(3) running 20.
    Kueue admits wl-a1 (7) and leaves wl-b (4). D7: wl-b is within cq-b's quota and goes first, then wl-a1."""
    got = cycle({"root": (None, 0), "cohort-a": ("root", 10), "cohort-b": ("root", 10)},
                {"cq-a1": q("cohort-a", 5), "cq-a2": q("cohort-a", 3), "cq-b": q("cohort-b", 5), "cq-c": q("cohort-b", 3)},
                [("a2-admitted", "cq-a2", 6), ("c-admitted", "cq-c", 20)], [("wl-a1", "cq-a1", 7), ("wl-b", "cq-b", 4)])
    assert got[0] == ["wl-a1", "wl-b"]  # Kueue: ["wl-a1"]


def test_hierarchical_fair_sharing_schedule_workload_which_wins_tournament_differs():
    """TestScheduleForFairSharing/hierarchical fair sharing schedule workload which wins tournament: A(200) -> B ->
    d (10), e (20); A -> C -> f, g (100); pending d1 70, e1 61, f1 1, g1 1. Kueue runs a tournament bottom up: d1
    beats e1 inside B (d's share after it, 80, below e's, 81), then B (100 after d1) beats C (101): d1 alone. D8:
    fairpod ranks every offer by the shares after its own admission level by level from the top, so e1 goes first
    (B at 91 after it), and f1 and g1 fit beside it."""
    got = cycle({"a": (None, 200), "b": ("a", 0), "c": ("a", 0)},
                {"d": q("b"), "e": q("b"), "f": q("c"), "g": q("c")},
                [("d0", "d", 10), ("e0", "e", 20), ("g0", "g", 100)],
                [("d1", "d", 70), ("e1", "e", 61), ("f1", "f", 1), ("g1", "g", 1)])
    assert got == (["e1", "f1", "g1"], [])  # Kueue: (["d1"], [])
