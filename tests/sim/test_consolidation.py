"""Consolidation through the simulator: a lender's 2-node job starts at once by reclaim, because borrowed work was
placed apart from work within quota and the reclaim takes its victims node by node. Before, every node with room
to free also ran a job of a team within its quota, and the job waited 4,804 s for those jobs to end."""

from __future__ import annotations

import yaml

from fairpod.sim import replay

from .helpers import write_trace

P4D = "ml.p4d.24xlarge"


def test_a_lenders_two_node_job_gets_whole_nodes_by_reclaim(tmp_path):
    # 4 p4d nodes. l lends its 2 nodes of quota; w runs within its 12 accelerators; b (quota 4) borrows the rest.
    # At 100 s one job ends on a node of w's (p4d-0) and one on a node of b's (p4d-3); b's next borrowed job and
    # w's next job then take one each: by name alone B6 went beside w's W1 and W4 beside b's B5, so that b's jobs
    # filled only one node (p4d-1) and l's 2-node job waited until w's jobs ended at 5,004 s. Now B6 joins B5 and
    # W4 joins W1, and the reclaim frees p4d-1 and p4d-3 (B1, B2, B5, B6: b is back at its quota), not B3 beside W3.
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "cluster": {"name": "t", "instance_groups": [{"name": "p4d", "instance_type": P4D, "count": 4}]},
        "policy": {"idle_compute_allocation": "FairShare"},
        "teams": [{"name": n, "fair_share_weight": 50, "sharing": {"strategy": "LendAndBorrow", "borrow_limit": lim},
                   "quota": [{"instance_type": P4D, **q}]}
                  for n, q, lim in (("l", {"count": 2}, 100), ("w", {"accelerators": 12}, 100),
                                    ("b", {"accelerators": 4}, 400))],
    }))
    rows = ["0,w,5000,4,1,W1", "1,w,99,4,1,W2", "2,b,9000,4,1,B1", "3,b,9000,4,1,B2", "4,w,5000,4,1,W3",
            "5,b,9000,4,1,B3", "6,b,94,4,1,B4", "7,b,9000,4,1,B5", "150,b,9000,4,1,B6", "160,w,5000,4,1,W4",
            "200,l,1000,16,2,L1"]
    trace = write_trace(tmp_path, rows, header="submit_time,team,duration,accelerators,nodes,name")
    r = replay(spec, trace, jobs=True)
    jobs = {j["name"]: j for j in r["jobs"]}
    assert jobs["L1"]["start"] == 200 and jobs["L1"]["end"] == 1200
    assert {n for n, j in jobs.items() if j["preemptions"]} == {"B1", "B2", "B5", "B6"}
    assert all(jobs[n]["preemptions"] == 0 for n in ("W1", "W3", "W4", "B3"))
