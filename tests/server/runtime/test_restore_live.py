"""``fairpod restore`` of an older backup while jobs that the backup does not know run: refused (their replicas
would run unmanaged, their accelerators given to other jobs); jobs the backup knows as running are adopted. The
restore takes the job ids back: a job submitted after it gets the id of a job of the discarded timeline, whose
token is refused for it; the token of a job the backup holds still works."""

from __future__ import annotations

import signal
from pathlib import Path

from ..conftest import SEED_SPEC, Server, wait_for


def test_restore_refuses_while_jobs_newer_than_the_backup_run(tmp_path: Path):
    s = Server(tmp_path, SEED_SPEC)
    backup = tmp_path / "old.db"
    s.start()
    try:
        tokens = {n: tmp_path / f"token-{n}" for n in ("old", "new")}  # each replica writes its job token
        keep = 'echo "$FAIRPOD_TOKEN" > "$0"; exec sleep 600'
        s.submit(name="old", team="john", command=["sh", "-c", keep, str(tokens["old"])])
        s.wait_state("old", "Running")
        s.cli("backup", str(backup))
        assert s.submit(name="new", team="smith", command=["sh", "-c", keep, str(tokens["new"])])["id"] == 2
        s.wait_state("new", "Running")
        wait_for(lambda: all(t.exists() and t.read_text().strip() for t in tokens.values()), 30, "the job tokens")
        token = {n: t.read_text().strip() for n, t in tokens.items()}
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
        # a job after the restore gets id 2 again: the token of the discarded timeline's job 2 is refused for it
        assert s.submit(name="later", team="smith", command=["sleep", "600"])["id"] == 2
        r = s.api("POST", "/jobs/2/progress", token["new"], json={"step": 999, "checkpoint": "/forged/by/smith"})
        assert r.status_code == 401 and "not valid for job later (id 2)" in r.json()["detail"], r.text
        assert s.job("later")["checkpoint"] is None or s.job("later")["checkpoint"].get("step") != 999
        r = s.api("POST", "/jobs/old/progress", token["old"], json={"step": 5, "checkpoint": "/ck/old"})
        assert r.status_code == 200, r.text  # a job the backup holds: its token still works
        assert s.job("old")["checkpoint"]["step"] == 5
        s.api("POST", "/jobs/later/cancel")
        s.api("POST", "/jobs/old/cancel")
        s.wait_state("old", "Cancelled")
    finally:
        s.kill(signal.SIGTERM)
        s.kill_replicas()
