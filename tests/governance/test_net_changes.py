"""A cycle's decisions turned into the net changes the simulator and the control plane apply."""

from __future__ import annotations

from fairpod.governance import Admit, Preempt, Wait, net_changes


def test_a_job_admitted_and_taken_back_in_one_cycle_only_waits():
    ds = [Admit("j", ("n0",), "admitted"), Preempt("j", "k", "fair-share", "preempted for fair share"),
          Admit("k", ("n0",), "admitted", after=("j", "v")), Preempt("v", "k", "reclaim", "reclaimed")]
    net = net_changes(ds)
    assert net == [Admit("k", ("n0",), "admitted", after=("v",)), Preempt("v", "k", "reclaim", "reclaimed"),
                   Wait("j", "waiting: admitted and given up again in the same cycle to job k (fair-share)")]


def test_plain_decisions_are_kept_in_order():
    ds = [Preempt("v", "k", "reclaim", "r"), Wait("w", "why"), Admit("k", ("n0",), "a", after=("v",))]
    assert net_changes(ds) == ds
