"""Services and Ray jobs in the simulator (``kind`` in the trace), through the engine as the control plane gives
them (``governance.kinds``): a service's minimum waits for room within its team's quota where a job borrows, its
replicas above the minimum are the first to go on reclaim and it loses no work, and a Ray job is admitted whole
or not at all. Each scenario also runs the same row as a plain (elastic) job, which is decided differently."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fairpod.governance import Admit, Grow, Shrink
from fairpod.model.spec import load_spec
from fairpod.sim import replay, simulate
from fairpod.sim.trace import TraceError, load_trace

from .helpers import write_trace

P4D = "ml.p4d.24xlarge"
HEADER = "submit_time,team,duration,accelerators,nodes,name,kind,min_nodes,min_replicas,max_replicas"


def _spec(tmp: Path) -> Path:
    # 4 nodes of 8 accelerators; john and smith 2 nodes of quota each, both lend and borrow
    doc = {
        "cluster": {"name": "t", "instance_groups": [{"name": "p4d", "instance_type": P4D, "count": 4}]},
        "policy": {"task_prioritization": "TaskRanking",
                   "priority_classes": [{"name": "high", "weight": 100}, {"name": "low", "weight": 10}]},
        "teams": [{"name": n, "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 100},
                   "quota": [{"instance_type": P4D, "count": 2}]} for n in ("john", "smith")],
    }
    p = tmp / "spec.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _jobs(tmp: Path, rows: list[str]) -> tuple[dict, dict]:
    r = replay(_spec(tmp), write_trace(tmp, rows, header=HEADER), jobs=True)
    return r, {j["name"]: j for j in r["jobs"]}


def test_a_services_minimum_waits_for_quota_while_a_job_borrows(tmp_path):
    rows = ["0,smith,1000,16,2,smith-a,,,,",  # smith's whole quota, until t=1000
            "10,smith,500,8,,web,service,,1,2",  # 1..2 replicas of 8: its minimum would borrow john's idle node
            "10,smith,300,8,1,smith-b,,,,"]  # a job: borrows one of john's idle nodes at once
    r, jobs = _jobs(tmp_path, rows)
    assert jobs["smith-b"]["wait"] == 0.0
    web = jobs["web"]
    assert web["kind"] == "service" and web["start"] == 1000.0, web  # when smith-a left room within the quota
    assert web["end"] == 1500.0 and web["lost_seconds"] == 0.0
    # it grew above its minimum by borrowing (2 replicas from 1000 to 1500)
    assert (web["replica_seconds_at_min"], web["replica_seconds_above_min"]) == (500.0, 500.0)
    kinds = r["teams"]["smith"]["kinds"]
    assert kinds["job"]["jobs"] == 2 and kinds["service"]["jobs"] == 1 and "ray" not in kinds
    assert kinds["service"]["replica_hours_at_min"] == pytest.approx(500 / 3600, abs=1e-4)
    assert r["cluster"]["kinds"]["service"]["replica_hours_above_min"] == pytest.approx(500 / 3600, abs=1e-4)
    # the same row as an elastic job (1..2 nodes): it borrows at once
    _, plain = _jobs(tmp_path, [rows[0], "10,smith,500,16,2,web,,1,,", rows[2]])
    assert plain["web"]["wait"] == 0.0


def test_replicas_above_the_minimum_go_first_on_reclaim(tmp_path):
    rows = ["0,smith,1000,8,,web,service,,1,3",  # grows to 3 replicas: 1 borrowed node of john's
            "0,smith,1000,8,1,smith-j,,,,",  # smith's job: a second borrowed node
            "100,john,300,8,1,john-a,,,,",  # john reclaims one node
            "100,john,300,8,1,john-b,,,,"]  # and another: smith's service shrinks to its minimum
    r, jobs = _jobs(tmp_path, rows)
    web = jobs["web"]
    assert jobs["john-a"]["wait"] == 0.0 and jobs["john-b"]["wait"] == 0.0
    assert web["shrinks"] == 2 and web["preemptions"] == 0 and web["lost_seconds"] == 0.0  # a replica at a time
    assert jobs["smith-j"]["preemptions"] == 0  # the job borrows too, but the service's replicas above min go first
    assert web["end"] == 1000.0  # up for its duration whatever its size
    # 1 replica at its minimum all along; above it: 2 until the reclaim, 0 while john's jobs run, 2 after
    assert web["replica_seconds_at_min"] == 1000.0 and web["replica_seconds_above_min"] == 2 * 100 + 2 * 600
    assert r["teams"]["smith"]["kinds"]["service"]["shrinks"] == 2
    assert r["cluster"]["lost_accelerator_seconds"] == 0.0


def test_a_service_preempted_whole_loses_no_work_and_is_up_for_its_duration(tmp_path):
    header = HEADER + ",priority"
    rows = ["0,john,1000,16,2,john-a,,,,,",  # john's whole quota: nothing to borrow
            "0,smith,500,8,,web,service,,2,2,low",  # smith's whole quota, up for 500 s
            "100,smith,200,16,2,urgent,,,,,high"]  # takes smith's quota from it by priority
    r = replay(_spec(tmp_path), write_trace(tmp_path, rows, header=header), jobs=True)
    web = {j["name"]: j for j in r["jobs"]}["web"]
    assert web["preemptions"] == 1 and web["lost_seconds"] == 0.0
    assert (web["start"], web["end"]) == (0.0, 700.0)  # down from 100 to 300, then up for its 400 s left
    assert web["replica_seconds_at_min"] == 2 * 500 and web["replica_seconds_above_min"] == 0.0
    assert r["teams"]["smith"]["kinds"]["service"]["preemptions"] == 1
    assert r["teams"]["smith"]["lost_accelerator_seconds"] == 0.0


def test_a_ray_job_is_admitted_whole_or_not_at_all(tmp_path):
    rows = ["0,smith,1000,16,2,smith-a,,,,",  # smith's quota until t=1000
            "0,john,400,8,1,john-a,,,,",  # one of john's nodes until t=400
            "10,john,300,24,3,rl,ray,,,"]  # a Ray cluster of 3 nodes: 1 free at t=10, 1 at t=400, 4 at t=1000
    spec = load_spec(_spec(tmp_path))

    def admitted(rows: list[str]) -> list[tuple[float, object]]:
        seen: list[tuple[float, object]] = []
        trace = load_trace(write_trace(tmp_path, rows, header=HEADER), spec)
        simulate(spec, trace, on_cycle=lambda t, ds: seen.extend((t, d) for d in ds if d.job == "rl"))
        return [(t, d) for t, d in seen if isinstance(d, Admit | Grow | Shrink)]

    got = admitted(rows)
    assert [(t, type(d).__name__, len(d.nodes)) for t, d in got] == [(1000.0, "Admit", 3)]
    _, jobs = _jobs(tmp_path, rows)
    assert jobs["rl"]["kind"] == "ray" and jobs["rl"]["start"] == 1000.0 and jobs["rl"]["end"] == 1300.0
    # the same Ray cluster as an elastic job of 1..3 nodes starts on the one free node at once
    elastic = admitted([*rows[:2], "10,john,300,24,3,rl,,1,,"])
    assert (elastic[0][0], len(elastic[0][1].nodes)) == (10.0, 1)


def test_a_services_minimum_beyond_its_teams_quota_never_runs(tmp_path):
    r, jobs = _jobs(tmp_path, ["0,smith,100,8,,big,service,,3,3"])  # 3 nodes; smith's quota is 2
    assert jobs["big"]["start"] is None
    assert r["never_ran"] == [{"name": "big", "team": "smith", "reason": (
        f"never runnable: a service's minimum of 3 replicas needs 3 nodes of {P4D}; team smith's quota is 2 "
        "(its minimum replicas never borrow)")}]


@pytest.mark.parametrize(("row", "msg"), [
    ("0,smith,100,8,2,web,service,,1,2", "column nodes: a service's size is min_replicas..max_replicas"),
    ("0,smith,100,8,,web,service,,3,2", "column max_replicas: 2 is less than min_replicas 3"),
    ("0,smith,100,16,,web,service,,1,2", "column accelerators: a service's accelerators are each replica's"),
    ("0,smith,100,16,2,rl,ray,1,,", "column min_nodes: a Ray job is one gang of a fixed size"),
    ("0,smith,100,16,2,j,,,1,", "column min_replicas: only a service has replicas"),
    ("0,smith,100,16,2,j,batch,,,", "column kind: 'batch' is not a kind (kinds: job, service, ray)"),
])
def test_kind_columns_are_checked(tmp_path, row, msg):
    with pytest.raises(TraceError, match=":2: " + msg.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        load_trace(write_trace(tmp_path, [row], header=HEADER), load_spec(_spec(tmp_path)))


def test_the_cli_reports_the_kinds_of_the_example_trace(tmp_path):
    # examples/seed/trace-kinds.csv as docs/simulator.md shows it
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "report.json"
    p = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "simulate", str(root / "examples/seed/spec.yaml"),
                        str(root / "examples/seed/trace-kinds.csv"), "--jobs", "--no-progress", "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    svc = r["cluster"]["kinds"]["service"]
    assert (svc["jobs"], svc["completed"], svc["shrinks"], svc["grows"]) == (2, 1, 1, 1)
    assert (svc["replica_hours_at_min"], svc["replica_hours_above_min"]) == (2.0, 1.1667)
    assert set(r["teams"]["john"]["kinds"]) == {"job", "ray"} and set(r["teams"]["smith"]["kinds"]) == {"service"}
    jobs = {j["name"]: j for j in r["jobs"]}
    assert (jobs["john-rl"]["start"], jobs["john-rl"]["kind"]) == (3600.0, "ray")
    assert [n["name"] for n in r["never_ran"]] == ["smith-big"] and r["makespan"] == 7200.0
