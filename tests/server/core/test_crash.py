"""kill -9 of the server while jobs run and wait: nothing is lost, nothing starts twice."""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

from ... import httpclient
from ..conftest import Server, wait_for


def test_kill_9_and_restart_keeps_every_job(server: Server):
    server.submit(name="long", team="john", nodes=2, command=["sleep", "20"])
    server.submit(name="short", team="john", command=["sh", "-c", "sleep 2; exit 3"])
    server.wait_state("long", "Running")
    server.wait_state("short", "Running")
    server.submit(name="queued", team="john", nodes=4, command=["true"])  # waits: needs the whole cluster
    before = {j["name"]: j for j in server.api("GET", "/jobs").json()["jobs"]}
    assert before["queued"]["state"] == "Pending"
    pid_file = server.home / "runs" / f"long-{before['long']['id']}" / "0" / "0" / "child.pid"
    # written by the replica's supervisor once it started the process, which may come after the job is Running
    long_pid = wait_for(lambda: pid_file.exists() and pid_file.read_text().split()[:1], 20, "long's process")[0]

    server.kill(signal.SIGKILL)
    # 'short' ends while nobody watches: its supervisor writes its exit, no server reads it yet
    short_status = server.home / "runs" / f"short-{before['short']['id']}" / "0" / "0" / "status.json"
    wait_for(short_status.exists, 20, "short's exit while the server is down")
    server.start()

    after = {j["name"]: j for j in server.api("GET", "/jobs").json()["jobs"]}
    assert set(after) == {"long", "short", "queued"}
    # the memory the restart built was settled (one full collection, then frozen: server/runtime/heap.py)
    metrics = httpclient.get(server.url + "/metrics", headers={"Authorization": f"Bearer {server.token}"}).text
    full = [line for line in metrics.splitlines() if line.startswith('fairpod_gc_collections_total{generation="2"}')]
    assert full and float(full[0].split()[-1]) >= 1, full
    short = wait_for(lambda: (j := server.job("short"))["state"] == "Failed" and j, 10, "short's exit")
    assert short["reason"] == "replica 0 exited 3"
    long = server.job("long")
    assert long["state"] == "Running" and pid_file.read_text().split()[0] == long_pid  # re-adopted
    assert [e["kind"] for e in long["events"]].count("JobStarted") == 1  # not started twice
    server.wait_state("long", "Succeeded", 30)
    server.wait_state("queued", "Succeeded", 30)
    assert server.cli("get-logs", "long").stdout.count("==== fairpod: job long") == 1



def test_an_exit_survives_kill_9_at_the_moment_it_is_taken_20_of_20(server: Server, tmp_path: Path):
    """The window reproducer: a replica exits 0 while the database is slow (the test holds SQLite's write lock),
    so the server has taken the exit and waits to commit it; kill -9 right then, release the lock, ``fairpod
    up``. Every job has Succeeded, ran once and started once: 20 trials of 20."""
    db = server.home / "fairpod.db"
    for i in range(20):
        out = tmp_path / f"ran-{i}"
        job = server.submit(name=f"w{i}", team="john", command=["sh", "-c", f"echo run >> {out}; sleep 0.5"],
                            auto_resume=True, max_retry=2)
        wait_for(lambda i=i: "JobStarted" in [e["kind"] for e in server.job(f"w{i}")["events"]], 20, "JobStarted")
        status = server.home / "runs" / f"w{i}-{job['id']}" / "0" / "0" / "status.json"
        lock = sqlite3.connect(db, isolation_level=None, timeout=30)
        try:
            lock.execute("BEGIN IMMEDIATE")  # a slow disk: every write of the server waits
            wait_for(status.exists, 20, f"the exit of trial {i}")
            time.sleep(0.2 + 0.1 * (i % 4))  # the server takes the exit and waits for the lock
            server.kill(signal.SIGKILL)
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        server.start()
        done = wait_for(lambda i=i: (j := server.job(f"w{i}"))["state"] in ("Succeeded", "Failed") and j, 20,
                        f"trial {i} to finish")
        kinds = [e["kind"] for e in done["events"]]
        assert (done["state"], done["reason"], done["restarts"]) == ("Succeeded", "all replicas exited 0", 0), done
        assert kinds.count("JobStarted") == 1, kinds
        assert out.read_text() == "run\n", f"trial {i} ran {out.read_text().count('run')} times"
