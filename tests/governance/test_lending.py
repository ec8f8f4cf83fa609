"""Rule 2a: lending limits (Kueue's lendingLimit) and absolute borrow limits (HyperPod's AbsoluteBorrowLimits).

Numbered as in fairpod.governance.lending:
  2a.1 a lender lends at most its lending limit of its idle quota;
  2a.2 it keeps quota - limit for itself: using that part reclaims nothing, using more reclaims;
  2a.3 a borrower uses at most quota + its absolute borrow limit, besides the percent limit;
  2a.4 a job that needs more than the lenders could ever lend within their limits never starts;
  2a.5 who borrows from whom honours the limits.
"""

from __future__ import annotations

import pytest

from fairpod.governance.quota import lending
from fairpod.model.spec import SpecError, parse_spec, seed_spec

from .helpers import T, admitted, cycle, make, preempted, submit, usage, waits


# 2a.1 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lend, borrowed", [(None, 8), (8, 8), (4, 4), (2, 2), (0, 0)])
def test_2a1_lender_lends_at_most_its_lending_limit(lend, borrowed):
    # a: quota 8 idle, lends at most `lend`; b: quota 4, may borrow 500 %
    snap = make(3, [{"name": "a", "quota": 8, "lend": lend}, {"name": "b", "quota": 4, "limit": 500}])
    for i in range(12):
        submit(snap, f"b{i}", "b", 1)
    ds = cycle(snap, 1.0)
    assert usage(snap, "b") == 4 + borrowed
    assert len(admitted(ds)) == 4 + borrowed
    if borrowed < 8:
        assert all("no idle unit4 capacity to borrow" in r for r in waits(ds).values())


# 2a.2 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("a_uses, reclaimed", [(4, 0), (5, 1), (8, 4)])
def test_2a2_lender_keeps_quota_minus_limit_for_itself(a_uses, reclaimed):
    snap = make(3, [{"name": "a", "quota": 8, "lend": 4}, {"name": "b", "quota": 4, "limit": 500}])
    for i in range(8):
        submit(snap, f"b{i}", "b", 1)
    cycle(snap, 1.0)
    assert usage(snap, "b") == 8  # 4 own + 4 lent by a
    for i in range(a_uses):
        submit(snap, f"a{i}", "a", 1, t=2.0)
    ds = cycle(snap, 2.0)
    assert len(preempted(ds)) == reclaimed  # what a uses of its kept part reclaims nothing
    assert usage(snap, "a") == a_uses and usage(snap, "b") == 8 - reclaimed


# 2a.3 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("percent, absolute, cap", [(100, None, 8), (100, 2, 6), (25, 2, 5), (100, 0, 4),
                                                    (500, 12, 16)])
def test_2a3_absolute_borrow_limit_besides_the_percent(percent, absolute, cap):
    snap = make(4, [{"name": "a", "quota": 12}, {"name": "b", "quota": 4, "limit": percent,
                                                 "borrow_abs": absolute}])
    for i in range(16):
        submit(snap, f"b{i}", "b", 1)
    ds = cycle(snap, 1.0)
    assert usage(snap, "b") == cap
    reasons = set(waits(ds).values())
    if cap < 16 and absolute is not None and 4 * (100 + percent) // 100 > 4 + absolute:
        assert any(f"quota 4 + its absolute borrow limit {absolute} allows {cap}" in r for r in reasons), reasons
    elif cap < 16:
        assert any(f"quota 4 + {percent}% allows {cap}" in r for r in reasons), reasons


# 2a.4 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("per_replica, starts", [(3, True), (4, False)])
def test_2a4_job_needing_more_than_lendable_never_starts(per_replica, starts):
    # b needs 2 x per_replica: 6 borrows 2 (a lends at most 2), 8 would borrow 4
    snap = make(3, [{"name": "a", "quota": 8, "lend": 2}, {"name": "b", "quota": 4, "limit": 500}])
    submit(snap, "big", "b", per_replica, n=2)
    ds = cycle(snap, 1.0)
    assert (admitted(ds) == ["big"]) is starts
    if not starts:
        submit(snap, "small", "b", 1, t=2.0)  # a job that can never start does not hold the team up
        assert admitted(cycle(snap, 2.0)) == ["small"]


# 2a.5 -------------------------------------------------------------------------------------------------
def test_2a5_lenders_named_within_their_limits():
    snap = make(4, [{"name": "a", "quota": 4, "lend": 1}, {"name": "c", "quota": 8, "lend": 3},
                    {"name": "b", "quota": 4, "limit": 500}])
    for i in range(8):
        submit(snap, f"b{i}", "b", 1)
    ds = cycle(snap, 1.0)
    assert usage(snap, "b") == 8
    assert lending(snap, T) == {"b": {"c": 3, "a": 1}}
    borrowed = sorted(d.lenders for d in ds if getattr(d, "borrowed", 0))
    assert sum(n for ls in borrowed for _, n in ls) == 4


# the spec ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("team_patch, message", [
    ({"sharing": {"strategy": "DontLend", "lending_limits": [{"instance_type": "ml.g5.12xlarge", "count": 1}]}},
     "teams[0].sharing.lending_limits: team 'john' has strategy DontLend, which does not lend"),
    ({"sharing": {"strategy": "Lend", "absolute_borrow_limits": [{"instance_type": "ml.g5.12xlarge", "count": 1}]}},
     "teams[0].sharing.absolute_borrow_limits: team 'john' has strategy Lend, which does not borrow"),
    ({"sharing": {"lending_limits": [{"instance_type": "ml.g5.12xlarge", "count": 1, "accelerators": 2}]}},
     "teams[0].sharing.lending_limits[0]: give exactly one of count, accelerators, vcpu or memory_gib"),
    ({"sharing": {"lending_limits": [{"instance_type": "ml.p9", "count": 1}]}},
     "teams[0].sharing.lending_limits[0].instance_type: unknown instance type 'ml.p9'"),
    ({"sharing": {"absolute_borrow_limits": [{"instance_type": "ml.g5.12xlarge", "count": -1}]}},
     "teams[0].sharing.absolute_borrow_limits[0].count: Input should be greater than or equal to 0"),
])
def test_spec_errors_are_one_line_each(team_patch, message):
    doc = seed_spec().model_dump(mode="json")
    doc["teams"][0].update(team_patch)
    with pytest.raises(SpecError) as e:
        parse_spec(doc)
    assert any(p.startswith(message) or message in p for p in e.value.problems), e.value.problems
    assert all("\n" not in p for p in e.value.problems)
