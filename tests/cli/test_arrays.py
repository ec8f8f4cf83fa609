"""Job arrays: one request, each task with its index, at most N at a time, grouped in list-jobs."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from ..server.conftest import SEED_SPEC, Server, wait_for

TASK = "echo $FAIRPOD_ARRAY_TASK_ID $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_COUNT > out-$FAIRPOD_ARRAY_TASK_ID; sleep 1"


def overlap(jobs: list[dict]) -> int:
    """The most tasks that ran at one time (from their start and end times)."""
    marks = sorted([(j["first_started_at"], 1) for j in jobs] + [(j["finished_at"], -1) for j in jobs],
                   key=lambda m: (m[0], m[1]))
    most = now = 0
    for _, d in marks:
        now += d
        most = max(most, now)
    return most


def tasks_of(server: Server, array_id: int) -> list[dict]:
    jobs = server.api("GET", "/jobs?limit=0").json()["jobs"]
    return [j for j in jobs if (j.get("array") or {}).get("job_id") == array_id]


def test_start_job_array_runs_each_index_at_most_n_at_a_time(server: Server, tmp_path: Path):
    r = server.cli("start-job", "--name", "sweep", "--team", "john", "--accelerators", "1", "--array", "0-6%2",
                   "--workdir", str(tmp_path), "-o", "json", "--", "sh", "-c", TASK)
    res = json.loads(r.stdout)
    aid = res["array_job_id"]
    assert [t["task_id"] for t in res["tasks"]] == list(range(7)) and res["limit"] == 2
    assert server.api("GET", "/jobs").json()["total"] == 7  # one request, seven jobs
    out = server.cli("list-jobs").stdout
    assert f"{aid}_[0-6]" in out and "sweep " in out and "7 tasks:" in out and "sweep-3" not in out, out
    assert "sweep-3" in server.cli("list-jobs", "--array-tasks").stdout
    held = server.job("sweep-6")
    assert held["state"] == "Pending" and "at most 2 tasks at a time" in held["reason"]
    wait_for(lambda: all(j["state"] == "Succeeded" for j in tasks_of(server, aid)), 60, "every task to succeed")
    jobs = tasks_of(server, aid)
    assert overlap(jobs) == 2, [(j["name"], j["first_started_at"], j["finished_at"]) for j in jobs]
    for i in range(7):
        assert (tmp_path / f"out-{i}").read_text().split() == [str(i), str(i), str(aid), "7"]
    r = server.cli("get-job", "sweep-4")
    assert f"Array:           sweep, task 4 (array job {aid})" in r.stdout


def test_array_throttle_survives_a_restart_and_scancel_takes_the_whole_array(tmp_path: Path):
    s = Server(tmp_path, SEED_SPEC)
    s.start()
    try:
        res = json.loads(s.cli("start-job", "--name", "long", "--team", "john", "--accelerators", "1", "--array",
                               "1,3,5,7%3", "-o", "json", "--", "sleep", "60").stdout)
        aid = res["array_job_id"]
        wait_for(lambda: sum(j["state"] == "Running" for j in tasks_of(s, aid)) == 3, 30, "3 tasks running")
        s.kill(signal.SIGTERM)  # the tasks keep running; the next server adopts them
        s.start()
        wait_for(lambda: s.cli("list-jobs").returncode == 0, 10, "the server")
        for _ in range(6):  # the held task stays held across reconcile turns
            assert s.job("long-7")["state"] == "Pending"
            wait_for(lambda: True, 0.3)
        r = s.cli("squeue")
        assert f"{aid}_7" in r.stdout and f"{aid}_1" in r.stdout
        s.cli("scancel", f"{aid}_3")
        s.wait_state("long-3", "Cancelled", 30)
        s.wait_state("long-7", "Running", 30)  # a slot came free
        s.cli("scancel", str(aid))
        wait_for(lambda: all(j["state"] == "Cancelled" for j in tasks_of(s, aid)), 40, "the array cancelled")
    finally:
        s.kill(signal.SIGTERM)
        s.kill_replicas()


def test_sbatch_array_in_one_request_with_slurm_variables_and_file_patterns(server: Server, tmp_path: Path):
    script = tmp_path / "arr.sbatch"
    script.write_text("#!/bin/sh\n#SBATCH --array=0-3%2\n#SBATCH -A john\n#SBATCH -o out-%A_%a.txt\n"
                      "echo task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT\n")
    r = server.cli("sbatch", "--parsable", "-D", str(tmp_path), str(script))
    aid = int(r.stdout.strip())
    wait_for(lambda: len(tasks_of(server, aid)) == 4 and all(j["state"] == "Succeeded"
                                                              for j in tasks_of(server, aid)), 60, "the array")
    for i in range(4):
        assert f"task {i} of 4" in (tmp_path / f"out-{aid}_{i}.txt").read_text()
    bad = server.cli("start-job", "--name", "x", "--team", "john", "--array", "5-1", "--", "true", check=False)
    assert bad.returncode == 1 and "'5-1' runs backwards" in bad.stderr, bad.stderr


def test_an_array_is_addressed_by_its_name_and_id_and_a_task_by_name_dash_index_or_id_underscore(server: Server):
    res = json.loads(server.cli("start-job", "--name", "sweep", "--team", "john", "--accelerators", "1", "--array",
                                "0-5%2", "-o", "json", "--", "sleep", "60").stdout)
    aid = res["array_job_id"]
    out = server.cli("get-job", "sweep").stdout
    assert f"sweep (array job {aid}), 6 tasks, at most 2 at a time" in out and f"{aid}_5" in out, out
    assert "6 pending" in out or "running" in out
    by_id = json.loads(server.cli("get-job", str(aid), "-o", "json").stdout)
    assert [t["task_id"] for t in by_id["array_tasks"]] == list(range(6))
    one = json.loads(server.cli("get-job", f"{aid}_5", "-o", "json").stdout)
    assert one["name"] == "sweep-5" and "array_tasks" not in one
    assert "Array:           sweep, task 5" in server.cli("get-job", "sweep-5").stdout
    r = server.cli("get-job", f"{aid}_9", check=False)
    assert r.returncode == 1 and f"job array {aid} has no task 9" in r.stderr
    r = server.cli("get-logs", "sweep", check=False)
    assert r.returncode == 1 and "is a job array of 6 tasks: name one, e.g. sweep-0" in r.stderr
    server.cli("cancel-job", f"{aid}_1")
    server.wait_state("sweep-1", "Cancelled")
    r = server.cli("cancel-job", "sweep")
    assert f"job array sweep (id {aid}): cancelled 5 of its 6 tasks" in r.stdout, r.stdout
    # the running tasks are Cancelled once their processes have stopped
    wait_for(lambda: all(j["state"] == "Cancelled" for j in tasks_of(server, aid)), 30, "every task to be Cancelled")


def test_a_cancel_that_outlasts_the_clients_wait_is_followed_and_never_called_failed(server: Server):
    """A large array's cancel takes longer than the CLI waits for an answer (here ``FAIRPOD_TIMEOUT`` is cut to
    0.05 s so that 1,000 tasks are enough; by default 30 s, which a 10,000-task array's cancel outlasted, and the
    CLI said ``failed: timed out`` although every task was cancelled): the CLI follows it to the end instead."""
    res = json.loads(server.cli("start-job", "--name", "big", "--team", "john", "--array", "0-999%4", "-o", "json",
                                "--", "sleep", "600").stdout)
    aid = res["array_job_id"]
    server.env["FAIRPOD_TIMEOUT"] = "0.05"
    try:
        r = server.cli("cancel-job", "big", check=False)
        server.env["FAIRPOD_TIMEOUT"] = "soon"
        bad = server.cli("list-jobs", check=False)
    finally:
        del server.env["FAIRPOD_TIMEOUT"]
    assert r.returncode == 0 and "failed" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert "no answer from" in r.stderr and "following the cancel" in r.stderr, r.stderr
    assert f"job array big (id {aid}): cancelled 1000 of its 1000 tasks" in r.stdout, r.stdout
    assert all(j["state"] == "Cancelled" for j in tasks_of(server, aid))
    assert bad.returncode == 1 and bad.stderr.strip() == (
        "fairpod: error: FAIRPOD_TIMEOUT='soon' is not a number of seconds between 0 and 86400"), bad.stderr
