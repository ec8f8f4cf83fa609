"""governance.explain: a team's standing at each level of the tree, who gets the next idle capacity and by which
rule, read from a snapshot without changing it."""

from __future__ import annotations

from fairpod.governance import explain

from .helpers import T, cycle, make, submit
from .test_groups import TREE


def _full_cluster_with_two_borrowers(policy: dict | None = None):
    snap = make(3, [{"name": "nlp", "quota": 4, "weight": 1, "group": "research"},
                    {"name": "web", "quota": 4, "weight": 100, "group": "ops"},
                    {"name": "other", "quota": 4}], TREE, **(policy or {}))
    for team in ("nlp", "web", "other"):
        submit(snap, f"{team}-own", team, 4, t=0.0)
    cycle(snap, 1.0)
    submit(snap, "web-more", "web", 2, t=1.0)
    submit(snap, "nlp-more", "nlp", 2, t=2.0)
    cycle(snap, 3.0)
    return snap


def test_the_heavy_groups_team_is_offered_first_and_the_rule_says_where():
    snap = _full_cluster_with_two_borrowers()
    before = (snap.version, dict(snap.pending))
    offers = explain.next_idle(snap, T)
    assert [o["team"] for o in offers] == ["nlp", "web"]
    assert offers[0]["rule"] == "first"
    assert offers[1]["rule"].startswith("rule 5 (2b): the lower weighted dominant share after admission at level 2")
    assert (snap.version, dict(snap.pending)) == before  # nothing changed


def test_levels_and_compare():
    snap = _full_cluster_with_two_borrowers()
    lv = explain.levels(snap, snap.teams["web"], T)
    assert [(x["level"], x["name"], x["weight"], x["quota"], x["in_use"]) for x in lv] == [
        ("group", "lab", 1, 8, 8), ("group", "ops", 10, 4, 4), ("team", "web", 100, 4, 4)]
    assert lv[0]["siblings"] == ["other"] and lv[1]["siblings"] == ["research"]
    c = explain.compare(snap, "web", "nlp", T)
    assert c["meet"] == "lab"
    assert c["explanation"][0] == ("web and nlp meet at group lab; there group ops (weight 10) stands against "
                                   "group research (weight 60)")
    c = explain.compare(snap, "web", "other", T)
    assert c["meet"] is None and "meet at the top of the tree; there group lab (weight 1)" in c["explanation"][0]


def test_first_come_first_serve_is_named():
    snap = _full_cluster_with_two_borrowers({"idle_compute_allocation": "FirstComeFirstServe"})
    offers = explain.next_idle(snap, T)
    assert [o["team"] for o in offers] == ["web", "nlp"]
    assert offers[1]["rule"] == "the earlier submitted job goes first"
