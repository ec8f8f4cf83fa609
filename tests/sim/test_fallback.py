"""The simulator with fallback instance types from the trace's instance_type column ("big8,old8"): the job runs on
its second choice at once while its first is full, and a job whose every type is busy says why for each."""

from __future__ import annotations

import pytest
import yaml

from fairpod.model.spec import parse_spec
from fairpod.sim import load_trace
from fairpod.sim.run import simulate
from fairpod.sim.trace import TraceError

from .helpers import write_trace

SPEC = {
    "cluster": {"name": "t", "instance_groups": [{"name": "b", "instance_type": "big8", "count": 1},
                                                 {"name": "o", "instance_type": "old8", "count": 1}]},
    "instance_types": [{"name": "big8", "accelerators": 8, "vcpu": 64, "memory_gib": 512},
                       {"name": "old8", "accelerators": 8, "vcpu": 32, "memory_gib": 256}],
    "teams": [{"name": "a", "sharing": {"strategy": "DontLend"},
               "quota": [{"instance_type": "big8", "count": 1}, {"instance_type": "old8", "count": 1}]}],
}
HEADER = "submit_time,team,duration,accelerators,nodes,name,instance_type"


def test_second_choice_in_a_replay(tmp_path):
    spec = parse_spec(yaml.safe_load(yaml.safe_dump(SPEC)))
    trace = write_trace(tmp_path, ["0,a,100,8,1,first,big8", '1,a,100,8,1,either,"big8,old8"',
                                   '2,a,100,8,1,third,"big8,old8"'], header=HEADER)
    res = simulate(spec, load_trace(trace, spec))
    jobs = {sj.job.name: sj for sj in res.jobs}
    assert jobs["either"].first_start == 1.0 and jobs["either"].nodes == ("o-0",)  # its second choice, at once
    assert jobs["third"].first_start == 100.0 and jobs["third"].nodes == ("b-0",)  # waited for the first free
    assert jobs["third"].reason.startswith("no instance type fits now: big8: "), jobs["third"].reason
    assert "; old8: " in jobs["third"].reason


def test_a_fallback_type_that_cannot_hold_the_job_is_refused(tmp_path):
    spec = parse_spec(yaml.safe_load(yaml.safe_dump(SPEC)))
    trace = write_trace(tmp_path, ['0,a,100,8,1,x,"big8,big8"'], header=HEADER)
    with pytest.raises(TraceError, match="name each instance type once"):
        load_trace(trace, spec)


def test_preemption_over_borrowing_in_a_replay(tmp_path):
    # a holds one big8 and one old8, b lends one more big8. a's "hold" (high) takes its big8, "low" its old8; then
    # "j" (high, big8 or old8): TryNextInstanceType borrows b's big8 at once; PreemptionOverBorrowing stops "low"
    # and runs on old8 within a's quota
    doc = yaml.safe_load(yaml.safe_dump(SPEC))
    doc["cluster"]["instance_groups"][0]["count"] = 2
    doc["teams"] = [{"name": "a", "sharing": {"borrow_limit": 100},
                     "quota": [{"instance_type": "big8", "count": 1}, {"instance_type": "old8", "count": 1}]},
                    {"name": "b", "quota": [{"instance_type": "big8", "count": 1}]}]
    doc["policy"] = {"task_prioritization": "TaskRanking",
                     "priority_classes": [{"name": "high", "weight": 90}, {"name": "low", "weight": 10}]}
    rows = ["0,a,1000,8,1,hold,big8,high", "0,a,1000,8,1,low,old8,low", '1,a,1000,8,1,j,"big8,old8",high']
    got = {}
    for policy in ("TryNextInstanceType", "PreemptionOverBorrowing"):
        doc["policy"]["fallback_when_can_borrow"] = policy
        spec = parse_spec(doc)
        trace = write_trace(tmp_path, rows, header=HEADER + ",priority")
        jobs = {sj.job.name: sj for sj in simulate(spec, load_trace(trace, spec)).jobs}
        got[policy] = (jobs["j"].first_start, jobs["j"].nodes, jobs["low"].preemptions)
    assert got == {"TryNextInstanceType": (1.0, ("b-1",), 0), "PreemptionOverBorrowing": (1.0, ("o-0",), 1)}
