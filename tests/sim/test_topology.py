"""Topology in the simulator: trace columns, the engine's placement by level, the report's topology figures."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fairpod.model.spec import load_spec
from fairpod.sim.report import build_report
from fairpod.sim.run import simulate
from fairpod.sim.trace import TraceError, load_trace

from .helpers import write_trace

HEADER = "submit_time,team,duration,accelerators,nodes,name,required_topology,preferred_topology"


def _spec(tmp: Path) -> Path:
    doc = {
        "cluster": {"name": "t", "topology_levels": ["block", "rack"], "instance_groups": [
            {"name": "r0", "instance_type": "unit1", "count": 4, "topology": {"block": "b0", "rack": "r0"}},
            {"name": "r1", "instance_type": "unit1", "count": 2, "topology": {"block": "b0", "rack": "r1"}},
            {"name": "r2", "instance_type": "unit1", "count": 3, "topology": {"block": "b1", "rack": "r2"}}]},
        "instance_types": [{"name": "unit1", "accelerators": 1, "vcpu": 2, "memory_gib": 4}],
        "teams": [{"name": "a", "quota": [{"instance_type": "unit1", "count": 9}]}],
    }
    p = tmp / "spec.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_required_jobs_run_in_one_rack_and_too_large_ones_never_run(tmp_path):
    spec = load_spec(_spec(tmp_path))
    trace = write_trace(tmp_path, [
        "0,a,10,2,2,two,rack,",     # best fit: r1 (2 nodes)
        "0,a,10,4,4,four,rack,",    # r0
        "0,a,10,3,3,three,rack,",   # r2
        "20,a,10,5,5,five,rack,",   # no rack has 5: never runs
        "20,a,10,6,6,six,,rack",    # preferred: block b0 (r0 + r1)
        "40,a,10,8,8,eight,,rack",  # no block has 8: over both blocks
    ], header=HEADER)
    res = simulate(spec, load_trace(trace, spec))
    r = build_report(res)
    by = {sj.job.name: sj for sj in res.jobs}
    assert [by[n].domains for n in ("two", "four", "three")] == [1, 1, 1]
    assert by["six"].domains == 2 and by["eight"].domains == 3
    assert r["topology"]["required"] == {"jobs": 4, "started": 3, "in_one_domain_share": 1.0, "mean_domains": 1.0}
    assert r["topology"]["preferred"]["started"] == 2
    assert r["never_ran"] == [{"name": "five", "team": "a", "reason": "never runnable: needs 5 healthy unit1 nodes "
                               "in one rack; the largest rack has 4 (rack r0)"}]
    assert r["makespan"] == 50  # all three rack jobs at once, then six, then eight


def test_trace_topology_columns_are_checked(tmp_path):
    spec = load_spec(_spec(tmp_path))
    bad = write_trace(tmp_path, ["0,a,10,2,2,x,row,"], header=HEADER)
    with pytest.raises(TraceError, match=r"trace.csv:2: column required_topology: the cluster has no topology "
                                         r"level 'row' \(cluster.topology_levels: block, rack\)"):
        load_trace(bad, spec)
    both = write_trace(tmp_path, ["0,a,10,2,2,x,rack,rack"], header=HEADER)
    with pytest.raises(TraceError, match="give one, not both"):
        load_trace(both, spec)


def test_mig_partitions_in_a_trace(tmp_path):
    doc = {"cluster": {"name": "m", "instance_groups": [
        {"name": "mig", "instance_type": "ml.p4de.24xlarge", "count": 1, "accelerator_partition_type": "mig-1g.10gb"}]},
        "teams": [{"name": "a", "quota": [{"instance_type": "ml.p4de.24xlarge.mig-1g.10gb", "count": 1}]}]}
    p = tmp_path / "mig.yaml"
    p.write_text(yaml.safe_dump(doc))
    spec = load_spec(p)
    rows = [f"0,a,10,2,1,j{i},," for i in range(29)]  # 28 x 2 partitions fill the node's 56; one waits
    res = simulate(spec, load_trace(write_trace(tmp_path, rows, header=HEADER), spec))
    r = build_report(res)
    assert r["makespan"] == 20 and r["cluster"]["capacity_accelerators"] == 56
    assert sorted(sj.first_start for sj in res.jobs).count(0.0) == 28
