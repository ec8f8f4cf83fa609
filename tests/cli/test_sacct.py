"""sacct's pieces that need no server: its fields, exit codes, elapsed times and time forms, as Slurm writes them
(the live runs are in tests/formats/corpus/test_slurm_hyperpod_corpus.py)."""

from __future__ import annotations

import time

import pytest

from fairpod.cli.errors import CliError
from fairpod.cli.sacct_cmds import columns, elapsed, exit_code, row, steps, when


def test_fields_widths_and_unknown_fields():
    assert columns("JobID,jobname%20,State") == [("jobid", "JobID", 12), ("jobname", "JobName", 20),
                                                 ("state", "State", 10)]
    with pytest.raises(CliError, match="unknown field 'MaxRSS'"):
        columns("JobID,MaxRSS")
    with pytest.raises(CliError, match="width after % must be a number"):
        columns("JobID%x")


def test_exit_codes_and_states_as_sacct_shows_them():
    base = {"id": 7, "name": "j", "instance_type": "t", "team": "a", "nodes": 2, "placement": ["n-0", "n-1"],
            "accelerators_per_node": 4, "submit_time": 1.0, "started_at": 10.0, "finished_at": 3735.0}
    assert exit_code({**base, "state": "Failed", "exit": {"0": "exited 3"}}) == "3:0"
    assert exit_code({**base, "state": "Failed", "exit": {"0": "killed by SIGKILL"}}) == "0:9"
    assert exit_code({**base, "state": "Failed", "exit": None}) == "1:0"
    assert exit_code({**base, "state": "Running"}) == "0:0"
    r = row({**base, "state": "Failed", "reason": "runtime limit 3600 s reached", "array": {"job_id": 5, "task_id": 2}},
            time.time())
    assert (r["jobid"], r["jobidraw"], r["state"], r["elapsed"], r["nodelist"], r["alloctres"]) == (
        "5_2", "7", "TIMEOUT", "01:02:05", "n-[0-1]", "node=2,gres/gpu=8")
    assert elapsed(2 * 86400 + 5) == "2-00:00:05"


def test_time_forms():
    now = time.time()
    assert abs(when("now-2hours", "-S") - (now - 7200)) < 5
    assert when("2026-01-02T03:04", "-S") == time.mktime((2026, 1, 2, 3, 4, 0, 0, 0, -1))
    with pytest.raises(CliError, match="-S 'yesterday'"):
        when("yesterday", "-S")


def test_step_lines_under_a_started_job_as_slurm_prints_them():
    """Slurm's sacct prints a job's line, then its ID.batch and ID.extern steps (scripts read the batch step's
    exit code, or pass -X for the job lines only); a job that has not started has none."""
    base = {"id": 9, "name": "train", "instance_type": "t", "team": "a", "nodes": 2, "placement": ["n-0", "n-1"],
            "accelerators_per_node": 0, "submit_time": 1.0, "started_at": 10.0, "finished_at": 70.0}
    job = {**base, "state": "Failed", "exit": {"0": "exited 3"}, "reason": "replica 0 exited 3"}
    batch, extern = steps(job, row(job, time.time()))
    assert (batch["jobid"], batch["jobname"], batch["state"], batch["exitcode"], batch["nodelist"]) == (
        "9.batch", "batch", "FAILED", "3:0", "n-0")
    assert (extern["jobid"], extern["jobname"], extern["state"], extern["exitcode"], extern["nodelist"]) == (
        "9.extern", "extern", "COMPLETED", "0:0", "n-[0-1]")
    late = {**base, "state": "Failed", "exit": {"0": "killed by SIGTERM"}, "reason": "runtime limit 60 s reached",
            "array": {"job_id": 4, "task_id": 1}}
    batch, _ = steps(late, row(late, time.time()))
    assert (batch["jobid"], batch["state"], batch["exitcode"]) == ("4_1.batch", "CANCELLED", "0:15")
    running = {**base, "state": "Running", "finished_at": None}
    assert [s["state"] for s in steps(running, row(running, time.time()))] == ["RUNNING", "RUNNING"]
    assert steps({**base, "state": "Pending", "started_at": None}, row({**base, "state": "Pending",
                                                                        "started_at": None}, time.time())) == []
