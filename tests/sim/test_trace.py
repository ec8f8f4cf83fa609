"""Trace loading: both formats, defaults, and errors that name file, line and column."""

from __future__ import annotations

import shutil

import pytest

from fairpod.model.spec import load_spec, parse_spec
from fairpod.sim import TraceError, load_trace, replay

from .helpers import ITP_DIR, ITP_SPEC, SEED_SPEC, write_trace


@pytest.fixture
def seed():
    return load_spec(SEED_SPEC)


def test_defaults(tmp_path, seed):
    p = write_trace(tmp_path, ["5,john,10,8,,,,,", "0,smith,10,2,,,,,training", "0,john,10,3,,,,,",
                               "0,john,10,6,,,,,"])
    jobs = {j.name: j for j in load_trace(p, seed)}
    assert list(jobs) == ["smith-1", "john-2", "john-3", "john-1"]  # submit order; default names per team
    j = jobs["john-1"]
    assert (j.itype, j.nodes, j.per_replica.acc, j.accelerators) == ("ml.g5.12xlarge", 2, 4, 8)
    assert j.priority == -1 and j.checkpoint_interval is None and j.min_runtime == 0
    assert jobs["john-2"].nodes == 1  # as few nodes as hold 3 accelerators
    assert (jobs["john-3"].nodes, jobs["john-3"].per_replica.acc) == (2, 3)  # 6 = 2 x 3
    s = jobs["smith-1"]
    assert (s.nodes, s.per_replica.acc, s.priority) == (1, 2, 50)
    # cpu and memory follow the accelerators by the node's ratio (48 vCPU, 192 GiB per 4 accelerators)
    assert s.per_replica.mcpu == 24000 and s.per_replica.mib == 96 * 1024


@pytest.mark.parametrize(
    ("row", "column", "words"),
    [
        ("0,nobody,10,4,,,,,", "team", "unknown team 'nobody'"),
        ("0,john,10,4,,,,,urgent", "priority", "unknown priority class 'urgent'"),
        ("0,john,ten,4,,,,,", "duration", "not a number"),
        ("-1,john,10,4,,,,,", "submit_time", ">= 0"),
        ("0,john,10,0,,,,,", "accelerators", "> 0"),
        ("0,john,10,2.5,,,,,", "accelerators", "whole number"),
        ("0,john,10,6,4,,,,", "accelerators", "cannot be split evenly over 4 nodes"),
        ("0,john,10,8,1,,,,", "accelerators", "8 per node, but a ml.g5.12xlarge node has 4"),
        ("0,john,10,4,0,,,,", "nodes", "> 0"),
        ("0,john,10,4,,,0,,", "checkpoint_interval", "> 0"),
        ("0,john,10,4,,,,x,", "min_runtime", "not a number"),
        ("0,,10,4,,,,,", "team", "required"),
    ],
)
def test_bad_rows_name_file_line_and_column(tmp_path, seed, row, column, words):
    p = write_trace(tmp_path, ["0,john,10,4,,,,,", row])
    with pytest.raises(TraceError) as e:
        load_trace(p, seed)
    msg = str(e.value)
    assert msg.startswith(f"{p}:3: column {column}: "), msg
    assert words in msg


def test_bad_files(tmp_path, seed):
    with pytest.raises(TraceError, match="missing column"):
        load_trace(write_trace(tmp_path, ["0,john"], header="submit_time,team"), seed)
    with pytest.raises(TraceError, match="unknown column.*priorty"):
        load_trace(write_trace(tmp_path, ["0,john,1,1,x"], header="submit_time,team,duration,accelerators,priorty"),
                   seed)
    with pytest.raises(TraceError, match=r":2: 3 cells"):
        load_trace(write_trace(tmp_path, ["0,john,1"], header="submit_time,team,duration,accelerators"), seed)
    with pytest.raises(TraceError, match=r":3: column name: .*'a' is already used at .*:2"):
        load_trace(write_trace(tmp_path, ["0,john,1,1,a", "0,john,1,1,a"],
                               header="submit_time,team,duration,accelerators,name"), seed)
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(TraceError, match="empty"):
        load_trace(tmp_path / "empty.csv", seed)
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path / "missing.csv", seed)
    empty_dir = tmp_path / "d"
    empty_dir.mkdir()
    with pytest.raises(TraceError, match="no \\*.csv files"):
        load_trace(empty_dir, seed)


def test_instance_type_required_when_the_cluster_has_several(tmp_path):
    spec = parse_spec({
        "cluster": {"instance_groups": [{"name": "a", "instance_type": "ml.g5.12xlarge", "count": 1},
                                        {"name": "b", "instance_type": "ml.p4d.24xlarge", "count": 1}]},
        "teams": [{"name": "x", "quota": [{"instance_type": "ml.p4d.24xlarge", "count": 1}]}],
    })
    p = write_trace(tmp_path, ["0,x,10,8,,,,,"])
    with pytest.raises(TraceError, match=r":2: column instance_type: the cluster has 2 instance types"):
        load_trace(p, spec)
    p = write_trace(tmp_path, ["0,x,10,8,ml.p4d.24xlarge"], header="submit_time,team,duration,accelerators,"
                    "instance_type")
    assert load_trace(p, spec)[0].itype == "ml.p4d.24xlarge"
    p = write_trace(tmp_path, ["0,x,10,8,ml.nope"], header="submit_time,team,duration,accelerators,instance_type")
    with pytest.raises(TraceError, match="unknown instance type 'ml.nope'"):
        load_trace(p, spec)


def test_jobs_that_can_never_run_are_reported_not_fatal(tmp_path):
    rows = [
        "0,john,10,20,5,too-many-nodes,,,",  # 5 nodes, the cluster has 4
        "0,smith,10,16,4,over-borrow-limit,,,",  # smith: quota 4 + 100 % = 8
        "0,john,10,4,1,fine,,,",
    ]
    r = replay(SEED_SPEC, write_trace(tmp_path, rows), jobs=True)
    never = {n["name"]: n for n in r["never_ran"]}
    assert set(never) == {"too-many-nodes", "over-borrow-limit"}
    assert "needs 5" in never["too-many-nodes"]["reason"] and "the cluster has 4" in never["too-many-nodes"]["reason"]
    assert "borrow limit" in never["over-borrow-limit"]["reason"]
    jobs = {j["name"]: j for j in r["jobs"]}
    assert jobs["too-many-nodes"]["start"] is None and jobs["too-many-nodes"]["end"] is None
    assert jobs["fine"]["end"] == 10.0
    assert r["teams"]["john"]["completed"] == 1 and r["teams"]["john"]["never_ran"] == 1


@pytest.mark.skipif(not ITP_DIR.is_dir(), reason="the ITP traces are not on this machine")
def test_itp_directory_slice(tmp_path):
    d = tmp_path / "itp"
    d.mkdir()
    for name in ("cluster01", "cluster04", "cluster10"):
        lines = (ITP_DIR / f"{name}.csv").read_text().splitlines()[:41]
        (d / f"{name}.csv").write_text("\n".join(lines) + "\n")
    shutil.copy(ITP_DIR / "README.md", d / "README.md")  # not a CSV: ignored
    spec = load_spec(ITP_SPEC)
    jobs = load_trace(d, spec)
    assert len(jobs) == 120
    assert {j.team for j in jobs} == {"cluster01", "cluster04", "cluster10"}
    assert [j.submit for j in jobs] == sorted(j.submit for j in jobs)
    first = next(j for j in jobs if j.name == "965d744f-0445-c1a8-12af-97e4c536c66e")  # 64 GPUs
    assert (first.team, first.accelerators, first.nodes, first.per_replica.acc) == ("cluster01", 64, 8, 8)
    assert first.submit == 1932025 and first.duration == 2429
    r = replay(ITP_SPEC, d, jobs=True)
    assert r["cluster"]["completed"] == 120 and r["never_ran"] == []
    assert 0 < r["cluster"]["utilization"] <= 1
    assert 0 < r["fairness"]["jain"] <= 1


def test_itp_and_fairpod_files_mix_in_one_directory(tmp_path, seed):
    write_trace(tmp_path, ["x1,0,10,4"], header="job_id,submission_time,duration,num_gpu", name="john.csv")
    write_trace(tmp_path, ["5,smith,10,4,,,,,"], name="other.csv")
    jobs = load_trace(tmp_path, seed)
    assert [(j.name, j.team) for j in jobs] == [("x1", "john"), ("smith-1", "smith")]
