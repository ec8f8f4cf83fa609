"""Consolidation (rule 12, ``policy.consolidation``) through the simulator: a 2-node job of a team within its quota
waits while its 16 free GPUs are spread over four p4d nodes; with the policy on, two borrowed jobs move and it starts.

4 x p4d (8 GPUs), quotas a 2 nodes, b 1, c 1. a's fillers arrive between c's jobs so that best fit cannot pack
them together, and end by t=500: node 1: c1 (4) + filler; node 2: c2 (4) + filler; node 3: bF (8 GPUs of b, ends at
t=600); node 4: b1 + b2 (4 each, admitted by borrowing beside bF). From t=600 b and c each run exactly their quota,
so no team borrows and reclaim takes nothing; 16 GPUs are free, 4 on node 1, 4 on node 2, 8 on node 3. a's J (2 x 8)
arrives at t=700; a's 3-node job at t=1,500 (it fits nowhere) is the next event, a cycle.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from fairpod.sim import replay

from .helpers import write_trace

P4D = "ml.p4d.24xlarge"
HEADER = "submit_time,team,duration,accelerators,nodes,name,checkpoint_interval,min_runtime"
LONG = 20000


def _spec(tmp: Path, policy: dict) -> Path:
    quotas = {"a": 2, "b": 1, "c": 1}
    doc = {
        "cluster": {"name": "t", "instance_groups": [{"name": "p4d", "instance_type": P4D, "count": 4}]},
        "policy": policy,
        "teams": [{"name": name, "fair_share_weight": 50, "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 500},
                   "quota": [{"instance_type": P4D, "count": n}] if n else []} for name, n in quotas.items()],
    }
    p = tmp / "spec.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


ROWS = [
    f"0,c,{LONG},4,1,c1,600,",
    "1,a,499,4,1,f1,,",
    f"2,c,{LONG},4,1,c2,600,",
    "3,a,497,4,1,f2,,",
    "4,b,596,8,1,bF,,",
    f"5,b,{LONG},4,1,b1,600,",
    f"6,b,{LONG},4,1,b2,600,",
    "700,a,1000,16,2,J,,",
    "1500,a,1000,24,3,late,,",
]


def _replay(tmp: Path, policy: dict) -> dict[str, dict]:
    r = replay(_spec(tmp, policy), write_trace(tmp, ROWS, header=HEADER), jobs=True)
    return {j["name"]: j for j in r["jobs"]}


def test_off_the_multi_node_job_waits_for_the_long_jobs(tmp_path):
    jobs = _replay(tmp_path, {})
    assert jobs["J"]["start"] >= LONG
    assert all(jobs[n]["preemptions"] == 0 for n in ("c1", "c2", "b1", "b2"))


def test_on_borrowed_jobs_move_and_the_multi_node_job_starts(tmp_path):
    jobs = _replay(tmp_path, {"consolidation": "WithinQuota"})
    assert jobs["J"]["start"] == 1500.0, jobs["J"]  # the first cycle after it has waited (gain > lost work)
    # b1 and b2 borrowed: they move (c's jobs were admitted within c's quota: never), restart a second later on
    # nodes 1 and 2, and lose only the work since their last checkpoint (every 600 s: at 1,205 and 1,206)
    assert [n for n in ("c1", "c2", "b1", "b2") if jobs[n]["preemptions"]] == ["b1", "b2"]
    for n, start in (("b1", 5.0), ("b2", 6.0)):
        lost = 1500.0 - (start + 1200.0)
        assert jobs[n]["lost_seconds"] == lost, jobs[n]
        assert jobs[n]["end"] == 1501.0 + (LONG - 1200.0), jobs[n]
