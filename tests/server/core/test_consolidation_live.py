"""Consolidation (``policy.consolidation``) on a control plane built in-process (real SQLite store, the timed executor,
a FAKE clock): borrowed jobs are preempted with the reason that they moved, requeued, and restart on other nodes
while the waiting 2-node job starts on the nodes they left."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from fairpod.model.jobs import JobState

from ..inproc import InProc

G5 = "ml.g5.12xlarge"  # 4 GPUs


def _spec(tmp: Path) -> Path:
    doc = {
        "cluster": {"name": "t", "instance_groups": [{"name": "w", "instance_type": G5, "count": 4}]},
        "policy": {"idle_compute_allocation": "FairShare", "consolidation": "WithinQuota"},
        "teams": [{"name": name, "fair_share_weight": 50, "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 100},
                   "quota": [{"instance_type": G5, "accelerators": acc}]} for name, acc in (("a", 8), ("b", 4),
                                                                                             ("c", 4))],
    }
    p = tmp / "spec.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_borrowed_jobs_move_and_the_waiting_job_gets_whole_nodes(tmp_path: Path) -> None:
    h = InProc(tmp_path, _spec(tmp_path))
    # the store stamps a submission with the wall clock: the fake clock runs an hour ahead of it, so that J has
    # waited an hour (x 8 GPUs) in the engine's eyes when it is first looked at
    h.clock.now = time.time() + 3600
    try:
        # one at a time, so that best fit spreads them: c's jobs each beside a short job of a; b's 4-GPU job on a
        # node of its own; b1 and b2 (borrowing beside it) on the last node
        for name, team, secs, acc in (("c1", "c", 10_000, 2), ("f1", "a", 10, 2), ("c2", "c", 10_000, 2),
                                      ("f2", "a", 10, 2), ("bf", "b", 10, 4), ("b1", "b", 10_000, 2),
                                      ("b2", "b", 10_000, 2)):
            h.submit(name, team, secs, accelerators=acc)
            h.turn()
        assert h.job("b1").borrowed_from and h.job("b1").placement == h.job("b2").placement
        assert not h.job("c1").borrowed_from and h.job("c1").placement != h.job("c2").placement
        h.clock.advance(20)
        h.turn(2)  # the short jobs end: 2 GPUs free beside each of c's jobs, bF's node empty; b at its quota
        assert h.job("bf").state == JobState.SUCCEEDED
        before = {n: h.job(n).placement for n in ("b1", "b2")}
        # J: 2 x 4 GPUs, 8 free but only one whole node, and reclaim has nothing to take (b runs its quota); b1
        # and b2 lose 20 s x 2 GPUs each if moved, J gains an hour x 8 GPUs: they move
        h.submit("j", "a", 100, nodes=2, accelerators=4)
        h.turn()
        for n in ("b1", "b2"):
            j = h.job(n)
            assert j.state == JobState.PREEMPTED and j.preemptions == 1
            assert j.reason.startswith("moved to free whole nodes for job"), j.reason
            (ev,) = h.events(j, "JobPreempted")
            assert (ev.data or {}).get("preemption") == "move"
        h.turn(3)  # the moved replicas stop; J starts on their node and bF's; b1 and b2 start again elsewhere
        j = h.job("j")
        assert j.state == JobState.RUNNING and before["b1"][0] in j.placement
        for n in ("b1", "b2"):
            b = h.job(n)
            assert b.state == JobState.RUNNING and b.placement != before[n], (n, b.state, b.reason)
            assert not set(b.placement) & set(j.placement)
    finally:
        h.close()
