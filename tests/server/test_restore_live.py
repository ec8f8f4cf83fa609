"""``fairpod restore`` of an older backup while jobs that the backup does not know run: refused (their replicas
would run unmanaged, their accelerators given to other jobs); jobs the backup knows as running are adopted."""

from __future__ import annotations

import signal
from pathlib import Path

from .conftest import SEED_SPEC, Server


def test_restore_refuses_while_jobs_newer_than_the_backup_run(tmp_path: Path):
    s = Server(tmp_path, SEED_SPEC)
    backup = tmp_path / "old.db"
    s.start()
    try:
        s.submit(name="old", team="john", command=["sleep", "600"])
        s.wait_state("old", "Running")
        s.cli("backup", str(backup))
        s.submit(name="new", team="smith", command=["sleep", "600"])
        s.wait_state("new", "Running")
        s.kill(signal.SIGTERM)  # fairpod down: replicas keep running
        db = s.home / "fairpod.db"
        before = db.read_bytes()
        r = s.cli("restore", str(backup), check=False)
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "new-2 (attempt 0)" in r.stderr and "old-1" not in r.stderr, r.stderr
        assert db.read_bytes() == before and not list(s.home.glob("fairpod.db.before-restore-*"))
        s.start()  # the job the backup does not know ends; then the backup may come back
        s.api("POST", "/jobs/new/cancel")
        s.wait_state("new", "Cancelled")
        s.kill(signal.SIGTERM)
        r = s.cli("restore", str(backup))
        assert "restored 1 jobs (1 unfinished)" in r.stdout
        s.start()
        assert s.api("GET", "/jobs/new").status_code == 404
        assert s.wait_state("old", "Running")["restarts"] == 0  # adopted: the same attempt runs on
        s.api("POST", "/jobs/old/cancel")
        s.wait_state("old", "Cancelled")
    finally:
        s.kill(signal.SIGTERM)
        s.kill_replicas()
