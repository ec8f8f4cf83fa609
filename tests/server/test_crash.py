"""kill -9 of the server while jobs run and wait: nothing is lost, nothing starts twice."""

from __future__ import annotations

import signal
import time

from .conftest import Server, wait_for


def test_kill_9_and_restart_keeps_every_job(server: Server):
    server.submit(name="long", team="john", nodes=2, command=["sleep", "20"])
    server.submit(name="short", team="john", command=["sh", "-c", "sleep 2; exit 3"])
    server.wait_state("long", "Running")
    server.wait_state("short", "Running")
    server.submit(name="queued", team="john", nodes=4, command=["true"])  # waits: needs the whole cluster
    before = {j["name"]: j for j in server.api("GET", "/jobs").json()["jobs"]}
    assert before["queued"]["state"] == "Pending"
    pid_file = server.home / "runs" / f"long-{before['long']['id']}" / "0" / "0" / "child.pid"
    long_pid = pid_file.read_text().split()[0]

    server.kill(signal.SIGKILL)
    time.sleep(3)  # 'short' ends while nobody watches
    server.start()

    after = {j["name"]: j for j in server.api("GET", "/jobs").json()["jobs"]}
    assert set(after) == {"long", "short", "queued"}
    short = wait_for(lambda: (j := server.job("short"))["state"] == "Failed" and j, 10, "short's exit")
    assert short["reason"] == "replica 0 exited 3"
    long = server.job("long")
    assert long["state"] == "Running" and pid_file.read_text().split()[0] == long_pid  # re-adopted
    assert [e["kind"] for e in long["events"]].count("JobStarted") == 1  # not started twice
    server.wait_state("long", "Succeeded", 30)
    server.wait_state("queued", "Succeeded", 30)
    assert server.cli("get-logs", "long").stdout.count("==== fairpod: job long") == 1
