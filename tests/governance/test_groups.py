"""Rule 2b: the tree of groups (fairpod.governance.groups), as Kueue's hierarchical cohorts.

  2b.1 idle capacity goes first to the lender's siblings, then up the tree;
  2b.2 fair share compares siblings by weight at each level: a team of a heavy group goes first even when the
       team weights say otherwise;
  2b.3 a group's borrow limit bounds what its whole subtree takes from outside (and a group that does not borrow
       keeps its subtree within its quota);
  2b.4 reclaim holds through every level: a team within its quota takes back what a team two levels away borrowed;
  2b.5 a group that does not lend lends its idle capacity only inside;
  2b.6 a spec without groups decides as before (the tree is empty, the ranks are the flat ones).
"""

from __future__ import annotations

import pytest

from fairpod.governance.quota import lending
from fairpod.model.spec import SpecError, parse_spec

from .helpers import T, admitted, cycle, make, preempted, submit, usage, waits

# lab -> research (weight 60), ops (weight 10); research -> nlp, vision; ops -> web; "solo" at the top
TREE = [
    {"name": "lab"},
    {"name": "research", "parent": "lab", "fair_share_weight": 60,
     "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 100}},
    {"name": "ops", "parent": "lab", "fair_share_weight": 10,
     "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 100}},
]


# 2b.1 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("with_groups", [True, False])
def test_2b1_siblings_before_cousins(with_groups):
    # nlp lends its 4 idle accelerators; its sibling vision and its cousin web each want 4 more than their quota.
    # The cousin submitted first and has the higher team weight: without groups it wins, with them the sibling.
    teams = [{"name": "nlp", "quota": 4, "group": "research" if with_groups else None},
             {"name": "vision", "quota": 4, "weight": 1, "group": "research" if with_groups else None},
             {"name": "web", "quota": 4, "weight": 100, "group": "ops" if with_groups else None}]
    snap = make(3, teams, TREE if with_groups else None)
    for i in range(2):
        submit(snap, f"web{i}", "web", 4, t=0.0)
    for i in range(2):
        submit(snap, f"vis{i}", "vision", 4, t=0.5)
    ds = cycle(snap, 1.0)
    if with_groups:
        assert usage(snap, "vision") == 8 and usage(snap, "web") == 4
        assert lending(snap, T) == {"vision": {"nlp": 4}}
        assert waits(ds)["web1"] == "no idle unit4 capacity to borrow"
    else:
        assert usage(snap, "vision") == 4 and usage(snap, "web") == 8  # flat: the heavier team weight wins


# 2b.2 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("with_groups", [True, False])
def test_2b2_heavy_groups_team_first_even_against_team_weights(with_groups):
    # "lender" (outside lab) lends 4; nlp (lab/research, weight 60) and web (lab/ops, weight 10) each want a job of
    # 4 beyond their quota. Team weights say web (100) before nlp (1); the group weights decide at the level above.
    groups = [{"name": "lab", "sharing": {"borrow_limit": 200}}, *TREE[1:], {"name": "other"}]
    g = with_groups
    snap = make(3, [{"name": "lender", "quota": 4, "group": "other" if g else None},
                    {"name": "nlp", "quota": 4, "weight": 1, "limit": 200, "group": "research" if g else None},
                    {"name": "web", "quota": 4, "weight": 100, "limit": 200, "group": "ops" if g else None}],
                groups if g else None)
    submit(snap, "nlp-own", "nlp", 4, t=0.0)
    submit(snap, "web-own", "web", 4, t=0.0)
    submit(snap, "web-big", "web", 4, t=0.5)
    submit(snap, "nlp-big", "nlp", 4, t=1.0)
    ds = cycle(snap, 2.0)
    winner, loser = ("nlp-big", "web-big") if g else ("web-big", "nlp-big")
    assert winner in admitted(ds) and loser in waits(ds)


@pytest.mark.parametrize("jobs, size", [(4, 1), (2, 2)])
def test_2b2_the_heavier_group_takes_idle_capacity_job_after_job(jobs, size):
    # a1 (weight 1, group ga of weight 90) and b1 (weight 100, group gb of weight 10) each want 4 more of the 4 idle
    # accelerators c1 (its own group) lends. At the top the groups compete by weight: after each admission the offers
    # are ranked again, so ga's team takes job after job while ga's weighted share stays below gb's (4/90 < 1/10).
    # Before, each team took one job per round: a1 got 3 of 4 jobs of 1, and 2 of 4 in jobs of 2.
    groups = [{"name": "ga", "fair_share_weight": 90, "sharing": {"borrow_limit": 100}},
              {"name": "gb", "fair_share_weight": 10, "sharing": {"borrow_limit": 100}}, {"name": "gc"}]
    snap = make(3, [{"name": "a1", "quota": 4, "weight": 1, "group": "ga"},
                    {"name": "b1", "quota": 4, "weight": 100, "group": "gb"},
                    {"name": "c1", "quota": 4, "group": "gc"}], groups)
    submit(snap, "a-own", "a1", 4, t=0.0)
    submit(snap, "b-own", "b1", 4, t=0.0)
    cycle(snap, 0.5)
    for i in range(jobs):
        submit(snap, f"b{i}", "b1", size, t=1.0)  # b1's first: submit order does not decide
        submit(snap, f"a{i}", "a1", size, t=1.0)
    cycle(snap, 2.0)
    assert usage(snap, "a1") == 8 and usage(snap, "b1") == 4


# 2b.3 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("limit, strategy, research_gets", [(25, "LendAndBorrow", 3), (50, "LendAndBorrow", 6),
                                                              (100, "LendAndBorrow", 12), (100, "Lend", 0)])
def test_2b3_group_borrow_limit_bounds_its_subtree(limit, strategy, research_gets):
    # research (nlp 8 + vision 4 = 12) may take limit % of 12 from outside, whichever of its teams borrows;
    # each team alone may borrow 500 %
    groups = [{"name": "research", "sharing": {"strategy": strategy, "borrow_limit": limit}}]
    snap = make(6, [{"name": "nlp", "quota": 8, "limit": 500, "group": "research"},
                    {"name": "vision", "quota": 4, "limit": 500, "group": "research"},
                    {"name": "idle", "quota": 12}], groups)
    for i in range(16):
        submit(snap, f"n{i}", "nlp", 1)
        submit(snap, f"v{i}", "vision", 1)
    ds = cycle(snap, 1.0)
    assert usage(snap, "nlp") + usage(snap, "vision") == 12 + research_gets
    reasons = set(waits(ds).values())
    if strategy == "Lend":
        assert any("group research (of team" in r and "(Lend) does not borrow" in r for r in reasons), reasons
    else:
        cap = 12 * (100 + limit) // 100
        assert any("borrow limit reached: group research" in r and f"quota 12 + {limit}% allows {cap}" in r
                   for r in reasons), reasons


# 2b.4 -------------------------------------------------------------------------------------------------
def test_2b4_reclaim_through_two_levels():
    # web (lab/ops) borrows nlp's (lab/research) idle quota through two levels; nlp's own jobs take it back
    snap = make(4, [{"name": "nlp", "quota": 8, "group": "research"},
                    {"name": "vision", "quota": 4, "group": "research"},
                    {"name": "web", "quota": 4, "group": "ops"}], TREE)
    for i in range(4):
        submit(snap, f"vis{i}", "vision", 1)
    for i in range(12):
        submit(snap, f"web{i}", "web", 1)
    cycle(snap, 1.0)
    assert usage(snap, "web") == 8  # quota 4 + 100 %, from nlp, two levels away
    for i in range(8):
        submit(snap, f"nlp{i}", "nlp", 1, t=2.0)
    ds = cycle(snap, 2.0)
    assert len(preempted(ds)) == 4
    assert all(p.kind == "reclaim" for p in ds if type(p).__name__ == "Preempt")
    assert usage(snap, "nlp") == 8 and usage(snap, "web") == 4


def test_2b4_reclaim_from_a_sibling_and_an_outsider():
    # vision borrows from its sibling nlp (research stays within its quota), web (outside) from "idle"; when nlp
    # wants its quota back, 4 accelerators of borrowed work are reclaimed
    groups = [{"name": "research"}]
    snap = make(5, [{"name": "nlp", "quota": 8, "group": "research"},
                    {"name": "vision", "quota": 4, "limit": 100, "group": "research"},
                    {"name": "web", "quota": 4, "limit": 100},
                    {"name": "idle", "quota": 4}], groups)
    for i in range(8):
        submit(snap, f"v{i}", "vision", 1)
        submit(snap, f"w{i}", "web", 1)
    cycle(snap, 1.0)
    assert usage(snap, "vision") == 8 and usage(snap, "web") == 8
    assert lending(snap, T) == {"vision": {"nlp": 4}, "web": {"idle": 4}}  # the sibling lender first
    for i in range(8):
        submit(snap, f"n{i}", "nlp", 1, t=2.0)
    ds = cycle(snap, 2.0)
    assert len(preempted(ds)) == 4 and usage(snap, "nlp") == 8
    assert usage(snap, "vision") + usage(snap, "web") == 12


# 2b.5 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy, web_gets", [("LendAndBorrow", 8), ("DontLend", 4)])
def test_2b5_group_that_does_not_lend_lends_only_inside(strategy, web_gets):
    groups = [{"name": "research", "sharing": {"strategy": strategy}}]
    snap = make(4, [{"name": "nlp", "quota": 8, "group": "research"},
                    {"name": "vision", "quota": 4, "limit": 100, "group": "research"},
                    {"name": "web", "quota": 4, "limit": 100}], groups)
    for i in range(8):
        submit(snap, f"w{i}", "web", 1)
    cycle(snap, 1.0)
    assert usage(snap, "web") == web_gets
    for i in range(8):
        submit(snap, f"v{i}", "vision", 1, t=2.0)
    cycle(snap, 2.0)
    assert usage(snap, "vision") == 8  # inside the group nlp lends either way


# 2b.6 -------------------------------------------------------------------------------------------------
def test_2b6_spec_form_and_its_errors():
    base = {"cluster": {"name": "t", "instance_groups": [{"name": "g", "instance_type": "ml.p4d.24xlarge",
                                                          "count": 2}]}}
    spec = parse_spec({**base, "groups": [
        {"name": "lab"},
        {"name": "research", "parent": "lab", "fair_share_weight": 60,
         "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 50}}],
        "teams": [{"name": "nlp", "group": "research", "quota": [{"instance_type": "ml.p4d.24xlarge", "count": 1}]}]})
    assert spec.group("research").parent == "lab" and spec.teams[0].group == "research"
    with pytest.raises(SpecError) as e:
        parse_spec({**base, "groups": [{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"},
                                       {"name": "c", "parent": "nowhere"}, {"name": "nlp"}],
                    "teams": [{"name": "nlp", "group": "zzz"}]})
    msg = str(e.value)
    assert "groups: a, b are their own ancestors" in msg
    assert "groups[2].parent: unknown group 'nowhere'" in msg
    assert "groups[3].name: 'nlp' is a team's name too" in msg
    assert "teams[0].group: unknown group 'zzz'" in msg


# 2b.7 -------------------------------------------------------------------------------------------------
def test_2b7_fair_share_preemption_compares_the_groups_where_the_paths_part():
    # "lender" (top) lends 8; web (lab/ops, weight 10) borrowed all of it first; nlp (lab/research, weight 60)
    # then asks. Team weights (web 100, nlp 1) would forbid the preemption; research's weight allows it.
    groups = [{"name": "lab", "sharing": {"borrow_limit": 200}},
              *({**g, "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 200}} for g in TREE[1:])]
    snap = make(4, [{"name": "lender", "quota": 8},
                    {"name": "nlp", "quota": 4, "weight": 1, "limit": 200, "group": "research"},
                    {"name": "web", "quota": 4, "weight": 100, "limit": 200, "group": "ops"}], groups)
    submit(snap, "nlp-own", "nlp", 4, t=0.0)
    for i in range(3):
        submit(snap, f"web{i}", "web", 4, t=0.0)
    cycle(snap, 1.0)
    assert usage(snap, "web") == 12 and usage(snap, "nlp") == 4  # web borrows the lender's 8
    submit(snap, "nlp-more", "nlp", 4, t=2.0)
    for i in range(3):
        snap.running[f"web{i}"].checkpoint = 4990.0  # a victim that just checkpointed loses little (rule 5)
    ds = cycle(snap, 5000.0)
    pre = [d for d in ds if type(d).__name__ == "Preempt"]
    assert [p.kind for p in pre] == ["fair-share"] and usage(snap, "nlp") == 8 and usage(snap, "web") == 8
    # and not back: web's next borrowed job does not preempt nlp's
    submit(snap, "web-back", "web", 4, t=6000.0)
    snap.running["nlp-more"].checkpoint = 19990.0
    ds = cycle(snap, 20000.0)
    assert not [d for d in ds if type(d).__name__ == "Preempt"]
