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
