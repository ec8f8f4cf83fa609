"""Retention end to end: a server deletes finished jobs, their events and logs once they are older than
``policy.retention_days``, and keeps everything else."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from sqlalchemy import text

from fairpod.store import Store

from ..conftest import SEED_SPEC, Server, wait_for


def test_a_restarted_server_deletes_jobs_finished_before_the_retention_period(tmp_path: Path):
    s = Server(tmp_path, SEED_SPEC)
    s.start()
    try:
        old = s.submit(name="old", team="john", command=["sh", "-c", "echo old output"])
        new = s.submit(name="new", team="john", command=["sh", "-c", "echo new output"])
        s.wait_state("old", "Succeeded")
        s.wait_state("new", "Succeeded")
        assert (s.home / "runs" / f"old-{old['id']}").is_dir()
    finally:
        s.kill(signal.SIGTERM)
    # "old" finished 500 days ago (the default retention is 400 days)
    store = Store(f"sqlite:///{s.home / 'fairpod.db'}")
    long_ago = time.time() - 500 * 86400
    with store.engine.begin() as c:
        c.execute(text("UPDATE jobs SET finished_at = :t, submit_time = :t WHERE id = :id"),
                  {"t": long_ago, "id": old["id"]})
        c.execute(text("UPDATE events SET ts = :t WHERE job_id = :id"), {"t": long_ago, "id": old["id"]})
    store.close()
    s.start()
    try:
        wait_for(lambda: s.api("GET", f"/jobs/{old['id']}").status_code == 404, 20, "the old job to be deleted")
        # its files go right after the rows' commit, in the same retention pass
        wait_for(lambda: not (s.home / "runs" / f"old-{old['id']}").exists(), 20, "the old job's files to go")
        assert s.job("new")["state"] == "Succeeded"
        assert (s.home / "runs" / f"new-{new['id']}").is_dir()
        events = s.api("GET", "/events", params={"limit": 1000}).json()
        assert "events" in events, events
        items = events["events"]
        assert not [e for e in items if e.get("job_id") == old["id"]]
        assert [e for e in items if e.get("job_id") == new["id"]]
        logs = s.cli("get-logs", "new", check=False)
        assert "new output" in logs.stdout
    finally:
        s.kill(signal.SIGTERM)
        s.kill_replicas()
