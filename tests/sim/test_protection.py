"""Rule 7 through the simulator: a job preempted five times runs on idle capacity again as soon as its team's
protected jobs fit within the team's quota, instead of waiting for room within that quota."""

from __future__ import annotations

import yaml

from fairpod.sim import replay

from .helpers import write_trace

P4D = "ml.p4d.24xlarge"


def test_a_protected_job_borrows_the_idle_node_again_instead_of_waiting_for_its_teams_quota(tmp_path):
    # two p4d nodes, one each of quota. b runs b1 (long) on its own node and b2 on l's idle one; each of l's five
    # short jobs reclaims b2 (it has lost the least work). After the fifth, b2 is protected. Before, it then
    # waited for room within b's quota, i.e. for b1's end at 100,000 s, with l's node idle; now it borrows at
    # once (b's protected jobs, b2 alone, fit b's quota), and nothing reclaims it again.
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "cluster": {"name": "t", "instance_groups": [{"name": "p4d", "instance_type": P4D, "count": 2}]},
        "policy": {"idle_compute_allocation": "FairShare"},
        "teams": [{"name": n, "fair_share_weight": 50, "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 100},
                   "quota": [{"instance_type": P4D, "count": 1}]} for n in ("b", "l")],
    }))
    rows = ["0,b,100000,8,1,b1", "0,b,20000,8,1,b2"] + [f"{100 + 1000 * i},l,500,8,1,l{i}" for i in range(5)]
    trace = write_trace(tmp_path, rows, header="submit_time,team,duration,accelerators,nodes,name")
    r = replay(spec, trace, jobs=True)
    jobs = {j["name"]: j for j in r["jobs"]}
    b2 = jobs["b2"]
    assert b2["preemptions"] == 5 and jobs["b1"]["preemptions"] == 0
    assert b2["end"] == 4600 + 20000  # restarted when l4 ended (4,100 + 500 s), on l's node
    assert r["makespan"] == 100000
