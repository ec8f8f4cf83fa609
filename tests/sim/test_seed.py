"""The seed example through the simulator: full use while both teams run, reclaim, lost work."""

from __future__ import annotations

from fairpod.model.spec import load_spec
from fairpod.sim import load_trace, replay, simulate

from .helpers import SEED_SPEC, SEED_TRACE, seed_rows, write_trace


def _jobs(report: dict) -> dict[str, dict]:
    return {j["name"]: j for j in report["jobs"]}


def test_seed_trace_uses_the_whole_cluster_while_both_teams_run():
    r = replay(SEED_SPEC, SEED_TRACE, timeline=True, jobs=True)
    cap = r["cluster"]["capacity_accelerators"]
    assert cap == 16
    at60 = next(e for e in r["timeline"] if e["t"] == 60.0)
    assert at60["allocated"] == {"john": 8, "smith": 8}
    assert sum(at60["allocated"].values()) == cap
    assert at60["borrowed"] == {"john": 0, "smith": 4}
    # john's second job reclaims the node smith borrowed
    at120 = next(e for e in r["timeline"] if e["t"] == 120.0)
    assert at120["allocated"] == {"john": 12, "smith": 0}
    assert r["teams"]["smith"]["preemptions"] == 1
    assert r["teams"]["john"]["preemptions"] == 0
    jobs = _jobs(r)
    assert jobs["smith-train"]["preemptions"] == 1
    assert jobs["smith-train"]["start"] == 60.0  # the first start
    # preempted at t=120 right at its checkpoint (60 s of run): nothing lost, 540 s left from t=600
    assert jobs["smith-train"]["lost_seconds"] == 0.0
    assert jobs["smith-train"]["end"] == 1140.0
    assert r["makespan"] == 1140.0
    assert r["never_ran"] == []


def test_lost_work_since_last_checkpoint(tmp_path):
    trace = write_trace(tmp_path, seed_rows(john_b_at=150))
    r = replay(SEED_SPEC, trace, jobs=True)
    smith = _jobs(r)["smith-train"]
    # ran 90 s (t=60..150), checkpointed at 60 s of run: 30 s lost, 540 s left when it restarts at 600
    assert smith["preemptions"] == 1
    assert smith["lost_seconds"] == 30.0
    assert r["teams"]["smith"]["lost_accelerator_seconds"] == 30.0 * 8
    assert smith["end"] == 600.0 + 540.0
    assert smith["run_seconds"] == 90.0 + 540.0


def test_without_checkpoints_the_whole_run_is_lost(tmp_path):
    trace = write_trace(tmp_path, seed_rows(smith_ckpt="", john_b_at=150))
    r = replay(SEED_SPEC, trace, jobs=True)
    smith = _jobs(r)["smith-train"]
    assert smith["lost_seconds"] == 90.0
    assert r["teams"]["smith"]["lost_accelerator_seconds"] == 720.0
    assert smith["end"] == 600.0 + 600.0


def test_min_runtime_delays_the_reclaim(tmp_path):
    trace = write_trace(tmp_path, seed_rows(smith_min_runtime="100"))
    r = replay(SEED_SPEC, trace, jobs=True)
    jobs = _jobs(r)
    # smith may not be stopped before 100 s of run (t=160); the simulator wakes the engine then
    assert jobs["john-train-b"]["start"] == 160.0
    assert jobs["john-train-b"]["wait"] == 40.0
    assert jobs["smith-train"]["preemptions"] == 1


def test_report_is_consistent():
    r = replay(SEED_SPEC, SEED_TRACE, jobs=True, timeline=True)
    for key in ("makespan", "cluster", "teams", "fairness", "engine", "never_ran"):
        assert key in r
    team_fields = ("jobs", "completed", "wait_mean", "wait_p50", "wait_p95", "used_accelerator_seconds",
                   "borrowed_accelerator_seconds", "lent_accelerator_seconds", "preemptions",
                   "lost_accelerator_seconds")
    for t in r["teams"].values():
        for f in team_fields:
            assert f in t
    for name, t in r["teams"].items():
        used = sum(j["accelerators"] * j["run_seconds"] for j in r["jobs"] if j["team"] == name)
        assert abs(t["used_accelerator_seconds"] - used) < 1e-6
        assert t["jobs"] == t["completed"] == sum(1 for j in r["jobs"] if j["team"] == name)
    total = sum(t["used_accelerator_seconds"] for t in r["teams"].values())
    assert r["cluster"]["allocated_accelerator_seconds"] == total
    util = r["cluster"]["utilization"]
    assert 0 < util <= 1
    assert abs(util - total / (16 * r["makespan"])) < 1e-4
    assert 0 < r["fairness"]["jain"] <= 1
    # everything smith borrowed was lent by john (no idle sharing)
    assert r["teams"]["smith"]["borrowed_accelerator_seconds"] == r["teams"]["john"]["lent_accelerator_seconds"]
    # smith borrowed 4 accelerators for 60 s before the reclaim and 540 s after john's first job ended
    assert r["teams"]["smith"]["borrowed_accelerator_seconds"] == 4 * 60 + 4 * 540
    assert r["engine"]["cpu_seconds"] >= 0 and r["engine"]["decisions"] >= 4
    for j in r["jobs"]:
        assert j["wait"] == j["start"] - j["submit"]


def test_optional_sections_only_on_request():
    r = replay(SEED_SPEC, SEED_TRACE)
    assert "timeline" not in r and "jobs" not in r
    r = replay(SEED_SPEC, SEED_TRACE, timeline=True)
    assert "timeline" in r and "jobs" not in r
    ts = [e["t"] for e in r["timeline"]]
    assert ts == sorted(ts) and len(set(ts)) == len(ts)
    assert r["timeline"][-1]["allocated"] == {"john": 0, "smith": 0}


def test_events_at_one_timestamp_make_one_cycle(tmp_path):
    rows = [f"0,john,100,4,1,j{i},,," for i in range(3)] + ["0,smith,100,4,1,s0,,,"]
    spec = load_spec(SEED_SPEC)
    res = simulate(spec, load_trace(write_trace(tmp_path, rows), spec))
    assert res.cycles == 2  # t=0 (four arrivals) and t=100 (four completions)
    assert res.admits == 4 and res.makespan == 100.0


def test_checkpoints_steer_the_choice_of_victim(tmp_path):
    header = "submit_time,team,duration,accelerators,name,checkpoint_interval"
    rows = ["0,john,1000,8,j1,", "0,smith,1000,4,s1,{ck}", "10,smith,1000,4,s2,", "100,john,1000,4,j2,"]
    # without checkpoints the job that loses least is s2 (90 s of run against s1's 100 s)
    r = replay(SEED_SPEC, write_trace(tmp_path, [x.format(ck="") for x in rows], header), jobs=True)
    assert {j["name"]: j["preemptions"] for j in r["jobs"]} == {"j1": 0, "s1": 0, "s2": 1, "j2": 0}
    # s1 checkpoints every 50 s: at t=100 it loses nothing, so it is the one reclaimed
    r = replay(SEED_SPEC, write_trace(tmp_path, [x.format(ck="50") for x in rows], header), jobs=True)
    jobs = _jobs(r)
    assert {n: j["preemptions"] for n, j in jobs.items()} == {"j1": 0, "s1": 1, "s2": 0, "j2": 0}
    assert jobs["s1"]["lost_seconds"] == 0.0


def test_priority_class_preempts_own_lower_priority_job(tmp_path):
    header = "submit_time,team,duration,accelerators,name,priority"
    rows = ["0,smith,100,4,s1,training", "0,john,100,12,train,training", "10,john,50,4,serve,inference"]
    r = replay(SEED_SPEC, write_trace(tmp_path, rows, header), jobs=True)
    jobs = _jobs(r)
    assert jobs["serve"]["start"] == 10.0 and jobs["serve"]["end"] == 60.0
    assert jobs["train"]["preemptions"] == 1
    assert jobs["train"]["lost_seconds"] == 10.0  # no checkpoints: its 10 s of run are lost
    assert jobs["train"]["end"] == 60.0 + 100.0  # restarts when serve ends, needs all 100 s again
    assert r["teams"]["john"]["lost_accelerator_seconds"] == 120.0
