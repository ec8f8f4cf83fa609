"""Small cases a replay of the ITP traces found, each on a tiny cluster through the simulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fairpod.sim import replay

from .helpers import write_trace

P4D = "ml.p4d.24xlarge"


def _spec(tmp: Path, nodes: int, teams: list[dict[str, Any]], **policy: Any) -> Path:
    doc = {
        "cluster": {"name": "t", "instance_groups": [{"name": "p4d", "instance_type": P4D, "count": nodes}]},
        "policy": policy,
        "teams": [
            {"name": t["name"], "fair_share_weight": t.get("weight", 50),
             "sharing": {"strategy": t.get("strategy", "LendAndBorrow"), "borrow_limit": t.get("limit", 100)},
             "quota": [{"instance_type": P4D, **({"accelerators": t["acc"]} if "acc" in t else {"count": t["nodes"]})}]}
            for t in teams
        ],
    }
    p = tmp / "spec.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _jobs(report: dict) -> dict[str, dict]:
    return {j["name"]: j for j in report["jobs"]}


def test_a_job_admitted_and_displaced_in_one_cycle_never_started(tmp_path):
    # one p4d; l lends 2, x (quota 2, weight 1) and y (quota 1, weight 10) borrow. At t=10 the engine admits x4
    # on the last idle accelerator and, later in the same cycle, takes it back for y's jobs: x4 never ran then.
    spec = _spec(tmp_path, 1, [{"name": "l", "acc": 2, "weight": 10, "limit": 100},
                               {"name": "x", "acc": 2, "weight": 1, "limit": 200},
                               {"name": "y", "acc": 1, "weight": 10, "limit": 500}])
    rows = [f"0,x,1000,1,1,x{i},," for i in (1, 2, 3)] + ["0,y,1000,1,1,y1,,",
            "10,x,1000,1,1,x4,,", "10,y,1000,4,1,y2,,", "10,y,1000,1,1,y3,,"]
    trace = write_trace(tmp_path, rows, header="submit_time,team,duration,accelerators,nodes,name,"
                        "checkpoint_interval,min_runtime")
    r = replay(spec, trace, jobs=True)
    jobs = _jobs(r)
    x4 = jobs["x4"]
    # it ran once, for its 1,000 s, from its reported start on: the start is real and so is the wait
    assert x4["preemptions"] == 0 and x4["lost_seconds"] == 0.0
    assert x4["end"] - x4["start"] == 1000.0 and x4["run_seconds"] == 1000.0
    assert x4["start"] >= 1000.0 and x4["wait"] == x4["start"] - 10
    assert r["cluster"]["preemptions"] == sum(j["preemptions"] for j in jobs.values())
    for j in jobs.values():  # a job never preempted ran once, from its reported start
        if j["preemptions"] == 0:
            assert j["run_seconds"] == 1000.0 and j["end"] - j["start"] == 1000.0, j


def test_the_starvation_guard_never_holds_a_team_out_of_its_own_quota(tmp_path):
    # 3 x p4d, a, c and d each own one node. a runs twelve 1-GPU jobs (borrowing 4 of c's), d one 8-GPU job;
    # a's 8-GPU job arrives at t=1 and starves (it must borrow). c's 1-GPU job at t=1,000 is within c's own
    # quota, on idle GPUs: it starts at once (reclaiming from a if need be), never held for a's head.
    spec = _spec(tmp_path, 3, [{"name": "a", "nodes": 1, "limit": 200}, {"name": "c", "nodes": 1},
                               {"name": "d", "nodes": 1}])
    rows = [f"0,a,100000,1,1,a{i},," for i in range(12)] + ["0,d,100000,8,1,d0,,", "1,a,1000,8,1,a-big,,",
                                                           "1000,c,1000,1,1,c0,,"]
    trace = write_trace(tmp_path, rows, header="submit_time,team,duration,accelerators,nodes,name,"
                        "checkpoint_interval,min_runtime")
    r = replay(spec, trace, jobs=True)
    c0 = _jobs(r)["c0"]
    assert c0["start"] == 1000.0, c0
    # c has 4 idle GPUs of its own quota: it takes one, reclaiming nothing from a
    assert r["teams"]["a"]["preemptions"] == 0


def test_capacity_held_for_a_starving_job_is_backfilled_with_jobs_that_cannot_delay_it(tmp_path):
    # One team on a private slice of 2 x p4d. A 16-GPU job waits from t=1 behind a 4-GPU job (ends at 1,000)
    # and an 8-GPU job (ends at 10,000): it can start at 10,000 at the earliest. At t=700 (the guard holds
    # both nodes for it) a 1-GPU job of 100 s fits before that and runs at once; one of 20,000 s would delay
    # it and waits.
    spec = _spec(tmp_path, 2, [{"name": "p", "nodes": 2, "strategy": "DontLend"}])
    rows = ["0,p,10000,8,1,long,,", "0,p,1000,4,1,mid,,", "1,p,5000,16,2,big,,",
            "700,p,100,1,1,short,,", "700,p,20000,1,1,later,,"]
    trace = write_trace(tmp_path, rows, header="submit_time,team,duration,accelerators,nodes,name,"
                        "checkpoint_interval,min_runtime")
    jobs = _jobs(replay(spec, trace, jobs=True))
    assert jobs["short"]["start"] == 700.0
    assert jobs["big"]["start"] == 10000.0
    assert jobs["later"]["start"] >= jobs["big"]["start"]
