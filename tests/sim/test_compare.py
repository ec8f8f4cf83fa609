"""``--compare``: the same trace on private quotas and under one global FCFS queue, rho per team."""

from __future__ import annotations

import json

from fairpod.model.spec import load_spec
from fairpod.sim import load_trace
from fairpod.sim.compare import compare

from .helpers import SEED_SPEC, SEED_TRACE, write_trace
from .test_cli import _run
from .test_small_cases import _spec


def test_compare_private_and_fcfs_from_the_command_line(tmp_path):
    out = tmp_path / "r.json"
    p = _run(SEED_SPEC, SEED_TRACE, "-o", out, "--compare", "private", "--compare", "fcfs")
    assert p.returncode == 0, p.stderr
    assert "no team loses by sharing" in p.stdout
    assert "team smith needs sharing: 1 of its jobs cannot run on its private quota" in p.stdout
    c = json.loads(out.read_text())["compare"]
    assert c["teams"]["john"]["rho"] == 1.0  # john's jobs run as soon as on its own nodes
    assert c["teams"]["john"]["fcfs"]["wait_mean"] == 240.0  # one queue: john-train-b waits behind smith
    assert c["private"]["completed"] == 2 and c["shared"]["completed"] == c["fcfs"]["completed"] == 3


def test_a_lender_that_waits_for_its_own_quota_loses_by_sharing(tmp_path):
    # a lends its idle node to b, whose jobs are protected for 1,000 s; a's own job then waits for them
    spec_path = _spec(tmp_path, 2, [{"name": "a", "nodes": 1}, {"name": "b", "nodes": 1, "limit": 100}],
                      max_min_runtime_seconds=1000)
    trace = write_trace(tmp_path, ["0,b,2000,8,1,b0,,1000", "0,b,2000,8,1,b1,,1000", "100,a,500,8,1,a0,,"],
                        header="submit_time,team,duration,accelerators,nodes,name,checkpoint_interval,min_runtime")
    spec = load_spec(spec_path)
    c = compare(spec, load_trace(trace, spec), ["private"])
    a = c["teams"]["a"]
    assert a["shared"]["wait_mean"] == 900.0 and a["private"]["wait_mean"] == 0.0
    assert a["rho"] == round(1400 / 500, 4)
    assert c["verdict"][0] == "team a loses by sharing: its jobs take 2.80x as long as on its private quota " \
                              "(180% longer)"
