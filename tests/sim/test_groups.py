"""The simulator takes the tree of groups from the same spec (examples/groups/spec.yaml): idle capacity goes to the
lender's sibling before a team of another group, where the flat spec gives it to the heavier team."""

from __future__ import annotations

import yaml

from fairpod.model.spec import load_spec, parse_spec
from fairpod.sim import load_trace
from fairpod.sim.run import simulate

from .helpers import ROOT, write_trace

GROUPS_SPEC = ROOT / "examples" / "groups" / "spec.yaml"
HEADER = "submit_time,team,duration,accelerators,nodes,name"
# 8 nodes: nlp runs 1 of its 2, infra both of its own; vision and web each run their 2 and want a third:
# one node (nlp's) is idle
ROWS = (["0,nlp,100,4,1,nlp0", "0,infra,100,4,1,infra0", "0,infra,100,4,1,infra1"]
        + [f"0,web,100,4,1,web{i}" for i in range(3)] + [f"0,vision,100,4,1,vision{i}" for i in range(3)])


def _starts(spec, tmp_path) -> dict[str, float | None]:
    trace = write_trace(tmp_path, ROWS, header=HEADER)
    return {sj.job.name: sj.first_start for sj in simulate(spec, load_trace(trace, spec)).jobs}


def test_the_lenders_sibling_gets_the_idle_node(tmp_path):
    starts = _starts(load_spec(GROUPS_SPEC), tmp_path)
    assert starts["vision2"] == 0.0 and starts["web2"] == 100.0


def test_without_the_tree_the_heavier_team_gets_it(tmp_path):
    doc = yaml.safe_load(GROUPS_SPEC.read_text())
    doc.pop("groups")
    for t in doc["teams"]:
        t.pop("group", None)
    starts = _starts(parse_spec(doc), tmp_path)
    assert starts["web2"] == 0.0 and starts["vision2"] == 100.0


def test_a_team_that_only_borrows_runs_on_its_groups_own_quota(tmp_path):
    # research holds 2 nodes itself (groups[].quota); "interns" has no quota and an absolute borrow limit of 8 GPUs:
    # two of its three jobs run at once on research's own nodes, the third after one ends
    doc = yaml.safe_load(GROUPS_SPEC.read_text())
    doc["cluster"]["instance_groups"][0]["count"] = 10
    doc["groups"][1]["quota"] = [{"instance_type": "ml.g5.12xlarge", "count": 2}]
    doc["teams"].append({"name": "interns", "group": "research", "sharing": {
        "strategy": "LendAndBorrow", "absolute_borrow_limits": [{"instance_type": "ml.g5.12xlarge", "accelerators": 8}]}})
    spec = parse_spec(doc)
    trace = write_trace(tmp_path, [f"0,interns,100,4,1,i{i}" for i in range(3)], header=HEADER)
    res = simulate(spec, load_trace(trace, spec))
    starts = {sj.job.name: sj.first_start for sj in res.jobs}
    assert starts == {"i0": 0.0, "i1": 0.0, "i2": 100.0}


def test_hierarchical_reclaim_takes_a_groups_quota_back(tmp_path):
    # research holds 1 node itself (9 nodes): at t=0 nlp and vision run their quotas and web runs 5 (its 2, infra's 2
    # and research's own node). At t=10 nlp wants one more: it fits research's quota (5) beside research's use (4).
    # With policy.hierarchical_reclaim web's borrowed job gives it back at once; without, nlp waits until one ends
    doc = yaml.safe_load(GROUPS_SPEC.read_text())
    doc["cluster"]["instance_groups"][0]["count"] = 9
    doc["groups"][1]["quota"] = [{"instance_type": "ml.g5.12xlarge", "count": 1}]
    doc["groups"][2]["sharing"]["borrow_limit"] = 200  # ops and web may borrow 3 nodes
    next(t for t in doc["teams"] if t["name"] == "web")["sharing"]["borrow_limit"] = 200
    rows = ([f"0,nlp,1000,4,1,nlp{i}" for i in range(2)] + [f"0,vision,1000,4,1,vision{i}" for i in range(2)]
            + [f"0,web,1000,4,1,web{i}" for i in range(5)] + ["10,nlp,1000,4,1,nlp-late"])
    trace = write_trace(tmp_path, rows, header=HEADER)
    results = {}
    for on in (False, True):
        doc["policy"]["hierarchical_reclaim"] = on
        spec = parse_spec(doc)
        res = simulate(spec, load_trace(trace, spec))
        results[on] = ({sj.job.name: sj.first_start for sj in res.jobs}["nlp-late"],
                       sum(sj.preemptions for sj in res.jobs if sj.job.team == "web"))
    assert results[False] == (1000.0, 0) and results[True] == (10.0, 1)
