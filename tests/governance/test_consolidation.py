"""Consolidation (rule 12, ``policy.consolidation``): borrowed jobs are moved to free whole nodes for a waiting
multi-node job when their lost work is less than its gain; within-quota work never moves; off by default.

The cluster of every case: 4 nodes of 4 accelerators (n0..n3). Team c runs c1 on n0 and c2 on n1 (2 each,
within its quota of 4); team b runs b1 on n2 and b2 on n3 (2 each; b's quota is 4, so b does not borrow as a
whole, and reclaim may take neither). Team a (quota 8, nothing running) submits J, 2 replicas of 4, at t=900:
8 accelerators are free, 2 on each node, so J fits nowhere until two nodes are emptied.
"""

from __future__ import annotations

from typing import Any

import pytest

from fairpod.governance import Workload
from fairpod.governance.consolidation import moved_reason
from fairpod.governance.decisions import Admit, Preempt, net_changes

from .helpers import T, admitted, cycle, make, per, preempted

NOW = 1000.0


def _run(snap, jid: str, team: str, node: str, *, borrowed: bool, checkpoint: float | None = None,
         preemptions: int = 0) -> Workload:
    w = Workload(jid, team, T, 1, per(2), submit=0.0, preemptions=preemptions)
    snap.assign(w, [node])
    w.started = 0.0
    w.checkpoint = checkpoint
    w.borrowed_from = {"a": 2} if borrowed else {}
    return w


def _case(mode: str | None = "WithinQuota", *, borrowed: bool = True, checkpoint: float | None = 950.0,
          j_submit: float = 900.0, j_quota: int = 8, preemptions: int = 0) -> dict[str, Any]:
    policy = {} if mode is None else {"consolidation": mode}
    snap = make(4, [{"name": "a", "quota": j_quota}, {"name": "b", "quota": 4}, {"name": "c", "quota": 4},
                    {"name": "d", "quota": 8 - j_quota}], **policy)
    names = sorted(snap.nodes)
    _run(snap, "c1", "c", names[0], borrowed=False)
    _run(snap, "c2", "c", names[1], borrowed=False)
    b1 = _run(snap, "b1", "b", names[2], borrowed=borrowed, checkpoint=checkpoint, preemptions=preemptions)
    b2 = _run(snap, "b2", "b", names[3], borrowed=borrowed, checkpoint=checkpoint, preemptions=preemptions)
    freed = sorted([*(b1.nodes or []), *(b2.nodes or [])])
    snap.add_pending(Workload("J", "a", T, 2, per(4), submit=j_submit))
    ds = cycle(snap, NOW)
    waiting = "J" in snap.pending
    nxt = net_changes(cycle(snap, NOW + 1))
    j = next((d for d in ds if isinstance(d, Admit) and d.job == "J"), None)
    return {
        "moved": sorted(preempted(ds)),
        "kinds": sorted({d.kind for d in ds if isinstance(d, Preempt)}),
        "reasons": sorted({d.reason for d in ds if isinstance(d, Preempt)}),
        "J": sorted(j.nodes) if j else None,
        "freed": freed,
        "J waits": waiting,
        "restarted": sorted(admitted(nxt)),
        "elsewhere": sorted(n for v in ("b1", "b2") if v in snap.running for n in snap.running[v].nodes or ()),
    }


J = Workload("J", "a", T, 2, per(4))


def test_borrowed_jobs_move_when_it_pays_and_the_freed_nodes_go_to_the_waiting_job():
    # b1 and b2 checkpointed at 950: moving them loses 2 x 50 s x 2 = 200 accelerator-seconds; J waited 100 s
    # with 8 accelerators (800): they move, J starts on the two nodes they leave, they restart beside c's jobs
    got = _case()
    assert got["moved"] == ["b1", "b2"] and got["kinds"] == ["move"]
    assert got["reasons"] == [moved_reason(J)]
    assert "moved to free whole nodes for job J of team a" in got["reasons"][0]
    assert got["J"] == got["freed"] and not got["J waits"]
    assert got["restarted"] == ["b1", "b2"]
    assert got["elsewhere"] and not set(got["elsewhere"]) & set(got["freed"])


@pytest.mark.parametrize(("why", "kwargs"), [
    ("the moved jobs would lose more than J gains (no checkpoint: 2 x 1,000 s x 2 = 4,000 > 800)",
     {"checkpoint": None}),
    ("J has not waited yet: it gains nothing", {"j_submit": NOW}),
    ("within-quota work never moves (b1 and b2 admitted within b's quota)", {"borrowed": False}),
    ("the policy is off by default", {"mode": None}),
    ("Off", {"mode": "Off"}),
    ("jobs preempted twice already are not moved again", {"preemptions": 2}),
    ("WithinQuota: J borrows (a's quota is 4, d lends 4), so nothing moves for it", {"j_quota": 4}),
])
def test_nothing_moves(why: str, kwargs: dict[str, Any]):
    got = _case(**kwargs)
    assert got["moved"] == [] and got["J"] is None and got["J waits"], why
    assert got["restarted"] == [], why  # nothing moved: b1 and b2 still run where they were


def test_also_borrowing_moves_for_a_job_that_borrows():
    got = _case("AlsoBorrowing", j_quota=4)
    assert got["moved"] == ["b1", "b2"] and got["J"] == got["freed"]


def test_nothing_moves_when_the_moved_jobs_could_not_restart_elsewhere():
    # b1 takes a whole node (4, borrowed) and n3 is empty: moving b1 would give J two whole nodes, but b1 itself
    # would then find no node with 4 free (2 beside each of c's jobs): that is no move, so nothing moves
    snap = make(4, [{"name": "a", "quota": 8}, {"name": "b", "quota": 4}, {"name": "c", "quota": 4}],
                consolidation="WithinQuota")
    names = sorted(snap.nodes)
    _run(snap, "c1", "c", names[0], borrowed=False)
    _run(snap, "c2", "c", names[1], borrowed=False)
    b1 = Workload("b1", "b", T, 1, per(4), submit=0.0)
    snap.assign(b1, [names[2]])
    b1.started, b1.checkpoint, b1.borrowed_from = 0.0, 999.0, {"a": 4}
    snap.add_pending(Workload("J", "a", T, 2, per(4), submit=0.0))
    ds = cycle(snap, NOW)
    assert preempted(ds) == [] and "J" in snap.pending and "b1" in snap.running
