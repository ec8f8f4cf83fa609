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
