"""Who borrows from whom, kept by the change of one team's usage at a time (``fairpod.sim.lenders.Book``): the same
as ``quota.lending`` counted from scratch, in the book and through a whole replay."""

from __future__ import annotations

import random

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairpod.governance.build import snapshot_from_spec
from fairpod.governance.quota import lending
from fairpod.model.spec import load_spec, parse_spec
from fairpod.sim.lenders import Book
from fairpod.sim.run import Simulation
from fairpod.sim.trace import load_trace

T = "ml.p4d.24xlarge"


def _doc(teams: list[dict], nodes: int, idle_sharing: bool) -> dict:
    return {
        "cluster": {"name": "t", "instance_groups": [{"name": "p4d", "instance_type": T, "count": nodes}]},
        "policy": {"idle_resource_sharing": "Enabled" if idle_sharing else "Disabled"},
        "teams": [
            {"name": t["name"], "fair_share_weight": 10,
             "sharing": {"strategy": t["strategy"], "borrow_limit": 300,
                         **({"lending_limits": [{"instance_type": T, "accelerators": t["lend"]}]}
                            if t["lend"] is not None and t["strategy"] != "DontLend" else {})},
             "quota": [{"instance_type": T, "accelerators": t["quota"]}] if t["quota"] else []}
            for t in teams
        ],
    }


def _recount(snap) -> tuple[dict[str, int], dict[str, int]]:
    """``quota.lending`` from scratch, summed: accelerators each team borrows, and lends."""
    borrowed: dict[str, int] = {}
    lent: dict[str, int] = {}
    for borrower, lenders in lending(snap, T).items():
        for lender, n in lenders.items():
            borrowed[borrower] = borrowed.get(borrower, 0) + n
            if lender in snap.teams:
                lent[lender] = lent.get(lender, 0) + n
    return borrowed, lent


team = st.fixed_dictionaries({
    "quota": st.sampled_from([0, 0, 4, 8, 16, 24]),
    "strategy": st.sampled_from(["LendAndBorrow", "LendAndBorrow", "Lend", "DontLend"]),
    "lend": st.sampled_from([None, None, 0, 3, 8]),
})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(team, min_size=1, max_size=8), st.integers(0, 3), st.booleans(),
       st.lists(st.tuples(st.integers(0, 7), st.integers(0, 60)), min_size=1, max_size=30))
def test_the_book_moved_by_one_team_at_a_time_attributes_as_a_recount(teams, spare, idle_sharing, changes):
    """Teams' usage changes one at a time (a team above its quota, below it, at nothing); after each, the book moved by
    that team alone says who borrows and who lends how much as ``quota.lending`` does from scratch (fails if the
    lenders are not kept in the order of their idle quota, or a team's lending limit is left out)."""
    for i, t in enumerate(teams):
        t["name"] = f"t{i}"
    nodes = max(1, -(-sum(t["quota"] for t in teams) // 8) + spare)  # quotas within the cluster, some unallocated
    snap = snapshot_from_spec(parse_spec(_doc(teams, nodes, idle_sharing)))
    book = Book(T)
    for t in snap.teams.values():
        book.update(t)
    for ti, acc in changes:
        t = snap.teams[f"t{ti % len(teams)}"]
        t.u(T)[0] = acc
        book.update(t)
        assert (book.over, book.attribute(snap)) == _recount(snap)


def test_a_replay_keeps_the_same_account_of_borrowing_as_one_that_recounts_every_type(tmp_path):
    """A contended replay (lending limits, a team that lends nothing, idle capacity no quota holds) integrates the same
    borrowed and lent accelerator-seconds, and records the same timeline, with the books as with ``quota.lending``
    recounted for every type a cycle changed."""
    teams = [{"name": "a", "quota": 16, "strategy": "LendAndBorrow", "lend": 8},
             {"name": "b", "quota": 8, "strategy": "LendAndBorrow", "lend": None},
             {"name": "c", "quota": 16, "strategy": "Lend", "lend": 4},
             {"name": "d", "quota": 8, "strategy": "DontLend", "lend": None},
             {"name": "e", "quota": 0, "strategy": "LendAndBorrow", "lend": None}]
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(_doc(teams, 7, True)))
    rng = random.Random(3)
    rows, t = ["submit_time,team,duration,accelerators,nodes"], 0.0
    for _ in range(300):
        t += rng.expovariate(1 / 40)
        nodes = rng.choice([1, 1, 1, 2])
        rows.append(f"{t:.3f},{rng.choice('abbde')},{rng.randint(60, 900)},"
                    f"{8 * nodes if nodes > 1 else rng.choice([1, 2, 4, 8])},{nodes}")
    (tmp_path / "trace.csv").write_text("\n".join(rows) + "\n")
    spec = load_spec(tmp_path / "spec.yaml")
    results = []
    for books in (True, False):
        sim = Simulation(spec, load_trace(tmp_path / "trace.csv", spec), record_timeline=True)
        if not books:
            sim.ledger.books.clear()  # every changed type recounted with quota.lending (as with groups)
        results.append(sim.run())
    kept, recounted = results
    assert kept.cycles == recounted.cycles > 300
    assert any(v > 0 for v in kept.borrowed.values()) and any(v > 0 for v in kept.lent.values())
    assert (kept.borrowed, kept.lent, kept.timeline) == (recounted.borrowed, recounted.lent, recounted.timeline)
