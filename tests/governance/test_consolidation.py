"""Consolidation (engine rules 1 and 3): borrowed work is placed apart from work within quota where that costs
nothing, and a reclaim that victim order alone would spread over many nodes takes its victims node by node, so
that a multi-node job of the lender gets whole nodes."""

from __future__ import annotations

import pytest

from fairpod.governance import Workload
from fairpod.governance.decisions import Admit

from .helpers import T, admitted, cycle, make, per, preempted, submit

# w: within its quota with every job below; b: borrows all but 1 accelerator; l: the lender
TEAMS = [{"name": "w", "quota": 4}, {"name": "b", "quota": 1, "limit": 400}, {"name": "l", "quota": 4}]


@pytest.mark.parametrize(
    ("first", "second", "new", "node"),
    [
        # rule 1's tie-break: two nodes with 1 accelerator free each (best fit cannot choose), one running work
        # within its team's quota, the other borrowed work; the new job joins the node of its own kind
        ("w", "b", "b", "g-1"),  # borrowed beside borrowed (by name alone: g-0, beside w's job)
        ("b", "w", "w", "g-1"),  # within quota beside within quota (by name alone: g-0, beside b's borrowed job)
        ("w", "b", "w", "g-0"),
        ("b", "w", "b", "g-0"),
    ],
)
def test_borrowed_work_is_placed_apart_from_work_within_quota(first, second, new, node):
    snap = make(3, TEAMS)
    submit(snap, "x", first, 3)
    cycle(snap)
    submit(snap, "y", second, 3, t=1)
    cycle(snap, 1)
    assert snap.running["x"].nodes == ["g-0"] and snap.running["y"].nodes == ["g-1"]
    submit(snap, "z", new, 1, t=2)
    ds = cycle(snap, 2)
    assert admitted(ds) == ["z"] and snap.running["z"].nodes == [node]
    assert [snap.running[j].borrows for j in ("x", "y")] == [first == "b", second == "b"]
    assert snap.running["z"].borrows == (new == "b")
    assert snap.nodes[node].borrowing == sum(snap.running[j].borrows for j in snap.nodes[node].jobs)
    for j in ("x", "y", "z"):
        snap.finish(j)
    assert all(nd.borrowing == 0 and not nd.jobs for nd in snap.nodes.values())


def _run(snap, jid: str, team: str, acc: int, node: str, started: float) -> None:
    w = Workload(jid, team, T, 1, per(acc), submit=started)
    snap.add_pending(w)
    snap.start(w, [node], started)


@pytest.mark.parametrize(
    ("lender_job_nodes", "victims", "nodes"),
    [
        # victim order (the newest start first) takes b6, b5, then b3 beside w's job on g-2, then b2; b is then
        # back within its quota and b1 is not taken: g-1 never empties. Node by node: g-3, then g-1
        (2, {"b1", "b2", "b5", "b6"}, ("g-1", "g-3")),
        # one node: victim order finds it (g-3: b6, b5), nothing else is taken
        (1, {"b5", "b6"}, ("g-3",)),
    ],
)
def test_reclaim_frees_whole_nodes_when_victim_order_would_fragment(lender_job_nodes, victims, nodes):
    snap = make(4, [{"name": "w", "quota": 6}, {"name": "b", "quota": 2, "limit": 400}, {"name": "l", "quota": 8}])
    for jid, team, node, t in [("w1", "w", "g-0", 0), ("w2", "w", "g-0", 1), ("b1", "b", "g-1", 2),
                               ("b2", "b", "g-1", 3), ("w3", "w", "g-2", 4), ("b3", "b", "g-2", 5),
                               ("b5", "b", "g-3", 7), ("b6", "b", "g-3", 8)]:
        _run(snap, jid, team, 2, node, t)
    submit(snap, "big", "l", 4, n=lender_job_nodes, t=10)
    ds = cycle(snap, 10)
    assert set(preempted(ds)) == victims
    assert [d.nodes for d in ds if isinstance(d, Admit)] == [nodes]
    assert snap.teams["b"].u(T)[0] == 10 - 2 * len(victims) >= 2  # b keeps its quota: w's jobs untouched


def test_no_reclaim_when_no_set_of_whole_nodes_can_be_freed():
    # b borrows only 4 (two jobs on two nodes beside w's): no order of b's jobs frees two nodes of 4
    snap = make(4, [{"name": "w", "quota": 8}, {"name": "b", "quota": 4, "limit": 400}, {"name": "l", "quota": 4}])
    for jid, team, node, t in [("w1", "w", "g-0", 0), ("b1", "b", "g-0", 1), ("w2", "w", "g-1", 2),
                               ("b2", "b", "g-1", 3), ("w3", "w", "g-2", 4), ("b3", "b", "g-2", 5),
                               ("w4", "w", "g-3", 6), ("b4", "b", "g-3", 7)]:
        _run(snap, jid, team, 2, node, t)
    submit(snap, "big", "l", 4, n=1, t=10)
    ds = cycle(snap, 10)
    assert not preempted(ds) and not admitted(ds)
