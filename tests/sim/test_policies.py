"""The simulator under the policies of rules 2a, 5b and 9: lending and absolute borrow limits, FairShareHistory
(and ``--compare history``), per-user caps and round-robin from a trace's ``user`` column."""

from __future__ import annotations

import json

import pytest
import yaml

from fairpod.model.spec import load_spec
from fairpod.sim import load_trace
from fairpod.sim.compare import compare
from fairpod.sim.run import simulate
from fairpod.sim.trace import TraceError

from .helpers import write_trace
from .test_cli import _run
from .test_small_cases import P4D, _spec

USER_HEADER = "submit_time,team,duration,accelerators,nodes,name,user"


def _with(path, team: str, **patch) -> None:
    doc = yaml.safe_load(path.read_text())
    t = next(t for t in doc["teams"] if t["name"] == team)
    for k, v in patch.items():
        if isinstance(v, dict):
            t.setdefault(k, {}).update(v)
        else:
            t[k] = v
    path.write_text(yaml.safe_dump(doc))


def _starts(res) -> dict[str, float | None]:
    return {sj.job.name: sj.first_start for sj in res.jobs}


def test_lending_and_absolute_borrow_limits_in_a_replay(tmp_path):
    # a lends at most 1 of its 2 nodes; b (1 node, 300 %) may borrow at most 16 accelerators (2 nodes) anyway
    spec_path = _spec(tmp_path, 4, [{"name": "a", "nodes": 2}, {"name": "b", "nodes": 1, "limit": 300},
                                    {"name": "c", "nodes": 1, "strategy": "Lend"}])
    trace = write_trace(tmp_path, [f"0,b,100,8,1,b{i},ann" for i in range(4)], header=USER_HEADER)
    spec = load_spec(spec_path)
    assert max(v for v in _starts(simulate(spec, load_trace(trace, spec))).values()) == 0.0  # all 4 at once
    _with(spec_path, "a", sharing={"lending_limits": [{"instance_type": P4D, "count": 1}]})
    _with(spec_path, "b", sharing={"absolute_borrow_limits": [{"instance_type": P4D, "accelerators": 16}]})
    spec = load_spec(spec_path)
    starts = _starts(simulate(spec, load_trace(trace, spec)))
    assert sorted(starts.values()) == [0.0, 0.0, 0.0, 100.0]  # 1 own + 2 borrowed (a's 1, c's 1), then 1


def test_per_user_cap_and_round_robin_from_the_user_column(tmp_path):
    spec_path = _spec(tmp_path, 2, [{"name": "a", "nodes": 2}])
    rows = [f"0,a,100,8,1,ann{i},ann" for i in range(3)] + ["1,a,100,8,1,bob0,bob"]
    trace = write_trace(tmp_path, rows, header=USER_HEADER)
    spec = load_spec(spec_path)
    plain = _starts(simulate(spec, load_trace(trace, spec)))
    assert plain == {"ann0": 0.0, "ann1": 0.0, "ann2": 100.0, "bob0": 100.0}
    _with(spec_path, "a", user_limits={"max_running_accelerators": 8})
    spec = load_spec(spec_path)
    capped = _starts(simulate(spec, load_trace(trace, spec)))
    assert capped == {"ann0": 0.0, "ann1": 100.0, "ann2": 200.0, "bob0": 1.0}
    _with(spec_path, "a", user_limits={"max_running_accelerators": None, "queue_order": "RoundRobin"})
    spec = load_spec(spec_path)
    # bob's job comes a second later, both nodes are taken by then; when they free, bob goes before ann2
    rr = _starts(simulate(spec, load_trace(trace, spec)))
    assert rr == {"ann0": 0.0, "ann1": 0.0, "ann2": 100.0, "bob0": 100.0}
    rows = [f"0,a,100,8,1,ann{i},ann" for i in range(4)] + ["0,a,100,8,1,bob0,bob"]
    trace = write_trace(tmp_path, rows, header=USER_HEADER, name="t2.csv")
    rr = _starts(simulate(spec, load_trace(trace, spec)))
    assert rr["bob0"] == 0.0 and rr["ann1"] == 100.0  # submitted at once: ann and bob take turns


def test_compare_history_shows_the_past_borrower_yielding(tmp_path):
    # x borrowed c's node for two hours; then x and y both want it, x a second earlier: under FairShare x gets
    # it (the earlier job in the trace), under FairShareHistory y does (x's past borrowing): x waits an hour
    spec_path = _spec(tmp_path, 3, [{"name": "x", "nodes": 1}, {"name": "y", "nodes": 1},
                                    {"name": "c", "nodes": 1, "strategy": "Lend"}],
                      fair_share_half_life_seconds=3600, starvation_guard_seconds=30 * 86400)
    rows = ["0,x,7200,8,1,x-own,u", "0,x,7200,8,1,x-old,u", "7200,x,3600,8,1,x-own2,u", "7200,y,3600,8,1,y-own,u",
            "7201,x,3600,8,1,x-new,u", "7201,y,3600,8,1,y-new,u"]
    trace = write_trace(tmp_path, rows, header=USER_HEADER)
    spec = load_spec(spec_path)
    c = compare(spec, load_trace(trace, spec), ["history"])
    assert c["history"]["idle_compute_allocation"] == "FairShareHistory"
    assert c["teams"]["x"]["shared"]["wait_mean"] == 0.0  # FairShare: x-new at once
    assert c["teams"]["x"]["history"]["wait_mean"] == 899.8  # x-new waits 3,599 s, the mean of x's 4 jobs
    assert (c["teams"]["y"]["shared"]["wait_mean"], c["teams"]["y"]["history"]["wait_mean"]) == (1799.5, 0.0)
    assert any(line.startswith("under FairShareHistory, team x waits") for line in c["verdict"]), c["verdict"]
    out = tmp_path / "r.json"
    p = _run(spec_path, trace, "-o", out, "--compare", "history")
    assert p.returncode == 0, p.stderr
    assert "under FairShareHistory, team x waits" in p.stdout
    assert json.loads(out.read_text())["compare"]["history"]["half_life_seconds"] == 3600


def test_budget_in_a_replay(tmp_path):
    # a: 1 node of quota, may borrow c's; budget 16 accelerator-hours a day (1970-01-01 is day 0 of the trace).
    # Two hours of 8 own + 8 borrowed spend it by 01:00; after that a may not borrow until the next day, and
    # with a hard cap none of its jobs starts until then.
    spec_path = _spec(tmp_path, 2, [{"name": "a", "nodes": 1}, {"name": "c", "nodes": 1, "strategy": "Lend"}])
    rows = ["0,a,3600,8,1,a-own,u", "0,a,3600,8,1,a-borrow,u", "3600,a,3600,8,1,a-own2,u",
            "3600,a,3600,8,1,a-borrow2,u"]
    trace = write_trace(tmp_path, rows, header=USER_HEADER)
    spec = load_spec(spec_path)
    assert _starts(simulate(spec, load_trace(trace, spec)))["a-borrow2"] == 3600.0  # no budget
    _with(spec_path, "a", budgets=[{"instance_type": P4D, "period": "day", "accelerator_hours": 16}])
    spec = load_spec(spec_path)
    res = simulate(spec, load_trace(trace, spec))
    assert res.makespan == 10800.0  # the wake-up at the next day, with nothing waiting, does not count
    starts = _starts(res)
    assert starts["a-own2"] == 3600.0 and starts["a-borrow2"] == 7200.0  # after a-own2: within quota again
    _with(spec_path, "a", budgets=[{"instance_type": P4D, "period": "day", "accelerator_hours": 16,
                                    "hard_cap": True}])
    spec = load_spec(spec_path)
    starts = _starts(simulate(spec, load_trace(trace, spec)))
    assert starts["a-own2"] == 86400.0 and starts["a-borrow2"] == 86400.0  # held until the next day


def test_preempting_to_borrow_by_priority_in_a_replay(tmp_path):
    # 3 nodes: lo and hi hold one each, idle lends its own. lo runs lo0 and borrows idle's node for lo1 (both low);
    # at t=10 hi wants its node and one more (high): with policy.preempt_to_borrow hi1 stops lo1 at once (lo1 is
    # borrowed and of lower priority), without it hi1 waits until lo1 ends
    classes = [{"name": "high", "weight": 90}, {"name": "low", "weight": 10}]
    spec_path = _spec(tmp_path, 3, [{"name": "lo", "nodes": 1}, {"name": "hi", "nodes": 1},
                                    {"name": "idle", "nodes": 1, "strategy": "Lend"}],
                      task_prioritization="TaskRanking", idle_compute_allocation="FirstComeFirstServe",
                      priority_classes=classes)
    rows = ["0,lo,1000,8,1,lo0,low", "0,lo,1000,8,1,lo1,low", "10,hi,1000,8,1,hi0,high", "10,hi,1000,8,1,hi1,high"]
    trace = write_trace(tmp_path, rows, header="submit_time,team,duration,accelerators,nodes,name,priority")
    spec = load_spec(spec_path)
    off = simulate(spec, load_trace(trace, spec))
    assert _starts(off)["hi1"] == 1000.0 and sum(sj.preemptions for sj in off.jobs) == 0
    doc = yaml.safe_load(spec_path.read_text())
    doc["policy"]["preempt_to_borrow"] = "LowerPriority"
    spec_path.write_text(yaml.safe_dump(doc))
    spec = load_spec(spec_path)
    on = simulate(spec, load_trace(trace, spec))
    assert _starts(on)["hi1"] == 10.0 and {sj.job.name: sj.preemptions for sj in on.jobs}["lo1"] == 1


def test_lower_or_newer_equal_priority_in_a_replay(tmp_path):
    # team a (2 nodes, DontLend): x runs, big (2 nodes) waits, small (submitted after big) starts on the free node.
    # When x ends, big still does not fit beside small: with preempt_team_tasks LowerOrNewerEqualPriority it stops
    # small (same priority, newer) and starts at 100; with LowerPriority it waits for small to end
    spec_path = _spec(tmp_path, 2, [{"name": "a", "nodes": 2, "strategy": "DontLend"}],
                      task_prioritization="TaskRanking")
    rows = ["0,a,100,8,1,x", "1,a,1000,16,2,big", "2,a,1000,8,1,small"]
    trace = write_trace(tmp_path, rows, header="submit_time,team,duration,accelerators,nodes,name")
    starts = {}
    for mode in ("LowerPriority", "LowerOrNewerEqualPriority"):
        _with(spec_path, "a", preempt_team_tasks=mode)
        spec = load_spec(spec_path)
        res = simulate(spec, load_trace(trace, spec))
        starts[mode] = (_starts(res)["big"], {sj.job.name: sj.preemptions for sj in res.jobs}["small"])
    assert starts == {"LowerPriority": (1002.0, 0), "LowerOrNewerEqualPriority": (100.0, 1)}


def test_priority_aging_in_a_replay(tmp_path):
    # one node of team a: hog runs 2 h; old (low) waits from 0, new (high) from 7100 s; hog ends at 2 h. By priority
    # new starts first; with 60 points an hour (at most 100) old, boosted to 10 + 100, passes new (90 + 1)
    classes = [{"name": "high", "weight": 90}, {"name": "low", "weight": 10}]
    spec_path = _spec(tmp_path, 1, [{"name": "a", "nodes": 1, "strategy": "DontLend"}],
                      task_prioritization="TaskRanking", priority_classes=classes)
    rows = ["0,a,7200,8,1,hog,high", "0,a,100,8,1,old,low", "7100,a,100,8,1,new,high"]
    trace = write_trace(tmp_path, rows, header="submit_time,team,duration,accelerators,nodes,name,priority")
    got = {}
    for rate in (0, 60):
        doc = yaml.safe_load(spec_path.read_text())
        doc["policy"].update({"priority_aging_per_hour": rate, "priority_aging_max": 100})
        spec_path.write_text(yaml.safe_dump(doc))
        spec = load_spec(spec_path)
        starts = _starts(simulate(spec, load_trace(trace, spec)))
        got[rate] = (starts["old"], starts["new"])
    assert got == {0: (7300.0, 7200.0), 60: (7200.0, 7300.0)}


def test_a_priority_change_in_a_replay(tmp_path):
    # one node of team a: hog runs until 1000; first (low) and second (low) wait; at 500 second is raised to high
    # (the trace's priority_change_at/_to, as fairpod set-priority): it preempts nothing (hog is high) but starts
    # before first when hog ends; without the change first goes first. A change before submit is refused
    classes = [{"name": "high", "weight": 90}, {"name": "low", "weight": 10}]
    spec_path = _spec(tmp_path, 1, [{"name": "a", "nodes": 1, "strategy": "DontLend"}],
                      task_prioritization="TaskRanking", priority_classes=classes)
    header = "submit_time,team,duration,accelerators,nodes,name,priority,priority_change_at,priority_change_to"
    spec = load_spec(spec_path)
    got = {}
    for change in ("", "500,high"):
        rows = ["0,a,1000,8,1,hog,high,,", "10,a,100,8,1,first,low,,", f"20,a,100,8,1,second,low,{change or ','}"]
        trace = write_trace(tmp_path, rows, header=header)
        starts = _starts(simulate(spec, load_trace(trace, spec)))
        got[change] = (starts["first"], starts["second"])
    assert got == {"": (1000.0, 1100.0), "500,high": (1100.0, 1000.0)}
    trace = write_trace(tmp_path, ["0,a,1000,8,1,hog,high,,", "20,a,100,8,1,second,low,5,high"], header=header)
    with pytest.raises(TraceError, match="column priority_change_at: 5 is before the job's submit_time 20"):
        load_trace(trace, spec)
