"""Elastic jobs in the simulator: they grow into idle capacity, shrink on reclaim, and the report counts shrinks
and grows apart from preemptions."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fairpod.model.spec import load_spec
from fairpod.sim import replay
from fairpod.sim.trace import TraceError, load_trace

from .helpers import write_trace

P4D = "ml.p4d.24xlarge"
HEADER = "submit_time,team,duration,accelerators,nodes,name,checkpoint_interval,min_nodes"


def _spec(tmp: Path) -> Path:
    doc = {
        "cluster": {"name": "t", "instance_groups": [{"name": "p4d", "instance_type": P4D, "count": 4}]},
        "teams": [{"name": n, "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 100},
                   "quota": [{"instance_type": P4D, "count": 2}]} for n in ("john", "smith")],
    }
    p = tmp / "spec.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_elastic_job_grows_when_a_job_ends_and_shrinks_when_its_lender_reclaims(tmp_path):
    rows = [
        "0,smith,600,16,2,smith-train,60,",
        "0,smith,1200,32,4,smith-ddp,60,1",  # elastic: 1..4 nodes, 1,200 s of work at 4 nodes
        "100,john,300,8,1,john-a,60,",  # john takes back one of the nodes smith-ddp borrows
    ]
    r = replay(_spec(tmp_path), write_trace(tmp_path, rows, header=HEADER), jobs=True)
    jobs = {j["name"]: j for j in r["jobs"]}
    ddp = jobs["smith-ddp"]
    assert r["cluster"]["preemptions"] == 0 and ddp["preemptions"] == 0
    assert ddp["shrinks"] == 1 and r["cluster"]["shrinks"] == 1 and r["engine"]["shrinks"] == 1
    assert ddp["grows"] >= 2 and r["engine"]["grows"] == ddp["grows"]  # when john-a ended and when smith-train ended
    assert jobs["john-a"]["wait"] == 0.0  # the reclaim took one replica, at once
    # every resize restarts from the last checkpoint: at most one interval of work lost each time (at the
    # rate of its 4 nodes at most), and the useful work is exactly the job's
    resizes = ddp["shrinks"] + ddp["grows"]
    assert 0 < ddp["lost_seconds"] <= resizes * 60
    assert ddp["run_seconds"] - ddp["lost_seconds"] == pytest.approx(1200.0)
    assert ddp["end"] is not None and r["teams"]["smith"]["shrinks"] == 1
    # it ran on fewer than 4 nodes for a while, so it took longer than 1,200 s; never less than at 4 nodes
    assert ddp["end"] - ddp["start"] > 1200.0


def test_a_non_elastic_copy_is_preempted_whole_instead(tmp_path):
    rows = ["0,smith,600,16,2,smith-train,60,", "0,smith,1200,8,1,smith-b,60,", "0,smith,1200,8,1,smith-c,60,",
            "100,john,300,8,1,john-a,60,"]
    r = replay(_spec(tmp_path), write_trace(tmp_path, rows, header=HEADER), jobs=True)
    assert r["cluster"]["preemptions"] == 1 and r["cluster"]["shrinks"] == 0


def test_min_nodes_above_nodes_is_refused_with_its_line(tmp_path):
    trace = write_trace(tmp_path, ["0,smith,600,16,2,x,60,3"], header=HEADER)
    with pytest.raises(TraceError, match=r"trace.csv:2: column min_nodes: 3 is more than the job's 2 nodes"):
        load_trace(trace, load_spec(_spec(tmp_path)))
