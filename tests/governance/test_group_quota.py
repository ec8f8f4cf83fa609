"""Rule 2b with quota a group holds itself (``groups[].quota``, as a Kueue Cohort's resourceGroups) and teams with no
quota that only borrow, up to an absolute borrow limit (a Kueue ClusterQueue with nominalQuota 0 and a
borrowingLimit)."""

from __future__ import annotations

from fairpod.governance.quota import lending
from fairpod.model.spec import SpecError, parse_spec

from .helpers import T, admitted, cycle, make, preempted, submit, usage, waits

DEPT = [{"name": "dept", "quota": [{"instance_type": T, "accelerators": 8}]}]


def test_teams_without_quota_borrow_their_groups_quota_up_to_their_absolute_limit():
    snap = make(2, [{"name": "x", "group": "dept", "borrow_abs": 6}, {"name": "y", "group": "dept", "borrow_abs": 4}],
                DEPT)
    for i in range(3):
        submit(snap, f"x{i}", "x", 2)
        submit(snap, f"y{i}", "y", 2)
    ds = cycle(snap, 1.0)
    assert usage(snap, "x") + usage(snap, "y") == 8 and usage(snap, "y") <= 4 and usage(snap, "x") <= 6
    adm = [d for d in ds if d.job in admitted(ds)]
    assert all(d.lenders == (("group dept", 2),) for d in adm), adm
    assert all("borrowing 2 accelerators from group dept" in d.reason for d in adm)
    assert lending(snap, T) == {"x": {"group dept": usage(snap, "x")}, "y": {"group dept": usage(snap, "y")}}


def test_a_team_without_quota_and_without_an_absolute_limit_still_borrows_nothing():
    snap = make(2, [{"name": "x", "group": "dept"}], DEPT)
    submit(snap, "x0", "x", 2)
    assert waits(cycle(snap, 1.0))["x0"] == f"over quota: team x has no quota on {T}, so it cannot borrow any"


def test_a_team_with_quota_in_the_group_reclaims_what_a_quota_less_team_borrowed():
    snap = make(3, [{"name": "x", "group": "dept", "borrow_abs": 12},
                    {"name": "z", "group": "dept", "quota": 4}], DEPT)
    for i in range(6):
        submit(snap, f"x{i}", "x", 2)
    cycle(snap, 1.0)
    assert usage(snap, "x") == 12  # the group's 8 and z's idle 4
    submit(snap, "z0", "z", 4, t=2.0)
    ds = cycle(snap, 3.0)
    assert admitted(ds) == ["z0"] and len(preempted(ds)) == 2 and usage(snap, "x") == 8


def test_the_groups_quota_goes_to_its_own_teams_before_anyone_outside():
    # dept lends (LendAndBorrow): its idle 8 may go outside, but its own team's job, ranked by the tree, goes first
    groups = [{"name": "dept", "quota": [{"instance_type": T, "accelerators": 8}],
               "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 100}}, {"name": "other", "sharing": {"borrow_limit": 200}}]
    snap = make(3, [{"name": "x", "group": "dept", "borrow_abs": 8},
                    {"name": "o", "group": "other", "quota": 4, "weight": 100, "limit": 200}], groups)
    submit(snap, "o-own", "o", 4, t=0.0)
    submit(snap, "o-more", "o", 4, n=2, t=0.0)
    submit(snap, "x0", "x", 4, n=2, t=0.5)
    ds = cycle(snap, 1.0)
    assert "x0" in admitted(ds) and "o-more" in waits(ds)


def test_a_group_that_does_not_lend_keeps_its_quota_inside():
    groups = [{"name": "dept", "quota": [{"instance_type": T, "accelerators": 8}], "sharing": {"strategy": "DontLend"}}]
    snap = make(3, [{"name": "x", "group": "dept", "borrow_abs": 8}, {"name": "o", "quota": 4, "limit": 200}], groups)
    submit(snap, "o-own", "o", 4)
    submit(snap, "o-more", "o", 4)
    ds = cycle(snap, 1.0)
    assert admitted(ds) == ["o-own"] and waits(ds)["o-more"] == f"no idle {T} capacity to borrow"


def test_group_quota_errors_are_one_line_each():
    # (dict(...), not a literal: the Kueue round-trip corpus takes literal spec dicts of the tests for specs)
    base = dict(cluster={"name": "c", "instance_groups": [{"name": "g", "instance_type": "ml.g5.12xlarge", "count": 2}]},
                teams=[{"name": "t", "group": "dept"}])
    for quota, want in [([{"instance_type": "nope", "count": 1}], "groups[0].quota[0].instance_type: unknown"),
                        ([{"instance_type": "ml.g5.12xlarge"}], "groups[0].quota[0]: give count"),
                        ([{"instance_type": "ml.g5.12xlarge", "count": 3}], "the quotas for ml.g5.12xlarge add up")]:
        try:
            parse_spec({**base, "groups": [{"name": "dept", "quota": quota}]})
        except SpecError as e:
            assert any(want in p for p in e.problems), e.problems
        else:
            raise AssertionError(f"{quota} was accepted")
