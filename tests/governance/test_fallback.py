"""Fallback instance types (Workload.choices; Kueue's flavor fungibility): a job naming several instance types in
order of preference starts on the first it fits now; borrowing counts as fitting or not as
``policy.fallback_when_can_borrow`` says (Borrow / TryNextInstanceType, Kueue's whenCanBorrow); a waiting job says
why each type was passed over; a preempted job waits for its first choice again."""

from __future__ import annotations

import pytest

from fairpod.governance import Workload, schedule
from fairpod.governance.build import snapshot_from_spec
from fairpod.governance.decisions import Admit, Wait
from fairpod.model.resources import by_ratio
from fairpod.model.spec import parse_spec

BIG, OLD = "big8", "old8"


def make(teams, **policy):
    spec = parse_spec({
        "cluster": {"name": "t", "instance_groups": [{"name": "b", "instance_type": BIG, "count": 2},
                                                     {"name": "o", "instance_type": OLD, "count": 2}]},
        "instance_types": [{"name": BIG, "accelerators": 8, "vcpu": 64, "memory_gib": 512},
                           {"name": OLD, "accelerators": 8, "vcpu": 32, "memory_gib": 256}],
        "policy": {"priority_classes": [{"name": "low", "weight": 10}, {"name": "high", "weight": 90}], **policy},
        "teams": teams,
    })
    return spec, snapshot_from_spec(spec)


def job(spec, jid, team, types, n=1, acc=8, t=0.0):
    cat = spec.catalog()
    choices = tuple((it, by_ratio(cat[it], acc)) for it in types)
    return Workload(jid, team, types[0], n, choices[0][1], submit=t, choices=choices if len(types) > 1 else ())


def team(name, quota, strategy="LendAndBorrow", limit=100):
    return {"name": name, "sharing": {"strategy": strategy, "borrow_limit": limit},
            "quota": [{"instance_type": it, "count": c} for it, c in quota.items()]}


def test_second_choice_taken_and_the_reason_for_the_first():
    spec, snap = make([team("a", {BIG: 1, OLD: 2}, "DontLend"), team("b", {BIG: 1}, "DontLend")])
    snap.add_pending(job(spec, "own", "a", [BIG]))
    schedule(snap)
    w = job(spec, "j", "a", [BIG, OLD], t=1.0)
    snap.add_pending(w)
    snap.now = 1.0
    ds = schedule(snap)
    adm = next(d for d in ds if isinstance(d, Admit))
    assert adm.job == "j" and adm.itype == OLD and adm.req == tuple(by_ratio(spec.catalog()[OLD], 8))
    assert snap.nodes[adm.nodes[0]].itype == OLD and w.itype == OLD
    assert f"on {OLD} ({BIG}: over quota: team a uses 8 of its 8 {BIG} accelerators" in adm.reason, adm.reason
    assert "(DontLend) does not borrow" in adm.reason
    assert snap.teams["a"].u(OLD)[0] == 8 and snap.teams["a"].u(BIG)[0] == 8


def test_a_waiting_job_says_why_each_type_was_passed_over():
    spec, snap = make([team("a", {BIG: 1, OLD: 1}, "DontLend"), team("b", {BIG: 1, OLD: 1}, "DontLend")])
    for it in (BIG, OLD):
        snap.add_pending(job(spec, f"own-{it}", "a", [it]))
    schedule(snap)
    snap.add_pending(job(spec, "j", "a", [BIG, OLD], t=1.0))
    snap.now = 1.0
    ds = schedule(snap)
    why = next(d.reason for d in ds if isinstance(d, Wait) and d.job == "j")
    assert why.startswith("no instance type fits now: ")
    assert f"{BIG}: over quota: team a uses 8 of its 8 {BIG}" in why and f"; {OLD}: over quota: team a uses 8" in why
    assert snap.pending["j"].itype == BIG  # it waits for its first choice


@pytest.mark.parametrize("policy, where, borrowed", [("Borrow", BIG, 8), ("TryNextInstanceType", OLD, 0)])
def test_borrowing_counts_as_fitting_or_not_by_policy(policy, where, borrowed):
    # a has no BIG quota but b lends its idle BIG node; OLD fits within a's quota
    spec, snap = make([team("a", {BIG: 1, OLD: 1}), team("b", {BIG: 1})], fallback_when_can_borrow=policy)
    snap.add_pending(job(spec, "own", "a", [BIG]))
    schedule(snap)
    snap.add_pending(job(spec, "j", "a", [BIG, OLD], t=1.0))
    snap.now = 1.0
    adm = next(d for d in schedule(snap) if isinstance(d, Admit))
    assert snap.nodes[adm.nodes[0]].itype == where and adm.borrowed == borrowed
    if policy == "TryNextInstanceType":
        assert f"{BIG}: would borrow (policy.fallback_when_can_borrow: TryNextInstanceType)" in adm.reason


def test_borrowing_first_choice_taken_when_no_later_type_fits_within_quota():
    spec, snap = make([team("a", {BIG: 1, OLD: 1}), team("b", {BIG: 1, OLD: 1}, "DontLend")],
                      fallback_when_can_borrow="TryNextInstanceType")
    for it in (BIG, OLD):
        snap.add_pending(job(spec, f"own-{it}", "a", [it]))
    schedule(snap)
    snap.add_pending(job(spec, "j", "a", [BIG, OLD], t=1.0))
    snap.now = 1.0
    # b lends nothing... a BIG node of b's is idle but b is DontLend: nothing fits at all
    assert not [d for d in schedule(snap) if isinstance(d, Admit)]


def test_a_preempted_job_waits_for_its_first_choice_again():
    # a's BIG node is busy; j borrows b's idle BIG node (first choice, policy Borrow); b reclaims it
    spec, snap = make([team("a", {BIG: 1, OLD: 1}), team("b", {BIG: 1, OLD: 1})])
    snap.add_pending(job(spec, "own", "a", [BIG]))
    snap.add_pending(job(spec, "j", "a", [BIG, OLD], t=0.5))
    schedule(snap)
    assert snap.running["j"].itype == BIG
    snap.add_pending(job(spec, "b0", "b", [BIG], t=1.0))
    snap.now = 1.0
    ds = schedule(snap)
    assert any(type(d).__name__ == "Preempt" and d.job == "j" for d in ds)
    assert snap.pending["j"].itype == BIG  # back in its queue, it wants its first choice again
    snap.now = 2.0
    adm = next(d for d in schedule(snap) if isinstance(d, Admit))
    assert adm.job == "j" and adm.itype == OLD  # then takes the second, within quota


def test_preemption_over_borrowing():
    """``PreemptionOverBorrowing`` (Kueue's flavorFungibility.preference): a's quota of both types is taken, big8 by
    a job of the same priority, old8 by a low-priority one; b lends its idle big8. With TryNextInstanceType the job
    borrows big8 (fit, borrowing); with PreemptionOverBorrowing it runs on old8 within a's quota in place of a's
    low-priority job there (preempt, no borrowing), which Kueue's order puts first."""
    got = {}
    for policy in ("TryNextInstanceType", "PreemptionOverBorrowing"):
        spec, snap = make([team("a", {BIG: 1, OLD: 1}), team("b", {BIG: 1})], task_prioritization="TaskRanking",
                          fallback_when_can_borrow=policy)
        for jid, it, prio in (("x", BIG, 90), ("y", OLD, 10)):
            w = job(spec, jid, "a", [it])
            w.priority = prio
            snap.add_pending(w)
        schedule(snap)
        w = job(spec, "j", "a", [BIG, OLD], t=1.0)
        w.priority = 90
        snap.add_pending(w)
        snap.now = 1.0
        ds = schedule(snap)
        adm = next(d for d in ds if isinstance(d, Admit) and d.job == "j")
        got[policy] = (adm.itype, adm.borrowed, sorted(d.job for d in ds if not isinstance(d, (Admit, Wait))))
        if policy == "PreemptionOverBorrowing":
            assert adm.reason == ("admitted within team a's quota, on old8 (big8: would borrow (policy.fallback_when_"
                                  "can_borrow: PreemptionOverBorrowing); preempting within quota before borrowing "
                                  "(policy.fallback_when_can_borrow: PreemptionOverBorrowing))")
    assert got == {"TryNextInstanceType": ("big8", 8, []), "PreemptionOverBorrowing": ("old8", 0, ["y"])}
