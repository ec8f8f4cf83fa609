"""``fairpod backup`` while the server runs and ``fairpod restore`` with it stopped, end to end through the CLI."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
from pathlib import Path

from ..conftest import SEED_SPEC, Server, wait_for


def test_backup_while_running_then_restore_brings_back_exactly_that_state(tmp_path: Path):
    s = Server(tmp_path, SEED_SPEC)
    s.start()
    backup = tmp_path / "b" / "fairpod-backup.db"
    backup.parent.mkdir()
    try:
        s.submit(name="before", team="john", command=["sh", "-c", "echo before"])
        s.wait_state("before", "Succeeded")
        s.submit(name="long", team="smith", command=["sleep", "600"])
        s.wait_state("long", "Running")
        r = s.cli("backup", str(backup), "-o", "json")
        got = json.loads(r.stdout)
        assert got["source"] == "the server" and got["jobs"] == 2 and got["unfinished_jobs"] == 1
        assert stat.S_IMODE(backup.stat().st_mode) == 0o600
        again = s.cli("backup", str(backup), check=False)
        assert again.returncode == 1 and "exists" in again.stderr and "--force" in again.stderr
        # a member may not take the database home
        tok = s.cli("user", "create", "mia", "--team", "john").stdout.split("token (shown once): ")[1].strip()
        r = s.cli("backup", str(tmp_path / "mine.db"), token=tok, check=False)
        assert r.returncode == 1 and "admin" in r.stderr and not (tmp_path / "mine.db").exists()
        s.submit(name="after", team="john", command=["true"])
        s.wait_state("after", "Succeeded")
        r = s.cli("restore", str(backup), check=False)
        assert r.returncode == 1 and "fairpod down" in r.stderr  # never under a running server
        s.api("POST", "/jobs/long/cancel")
        s.wait_state("long", "Cancelled")
    finally:
        s.kill(signal.SIGTERM)
    r = s.cli("restore", str(backup))
    assert "restored 2 jobs (1 unfinished)" in r.stdout and "before-restore-" in r.stdout
    kept = [p for p in s.home.iterdir() if p.name.startswith("fairpod.db.before-restore-")]
    assert len(kept) == 1 and sqlite3.connect(kept[0]).execute("SELECT count(*) FROM jobs").fetchone()[0] == 3
    assert stat.S_IMODE((s.home / "fairpod.db").stat().st_mode) == 0o600
    s.start()
    try:
        assert s.job("before")["state"] == "Succeeded"
        assert s.api("GET", "/jobs/after").status_code == 404  # made after the backup: not in it
        # "long" was running in the backup and has been stopped since: handled as after a crash
        wait_for(lambda: s.job("long")["state"] != "Running", 30, "the restored running job to be reconciled")
        assert "before" in s.cli("get-logs", "before").stdout
    finally:
        s.kill(signal.SIGTERM)
        s.kill_replicas()


def test_backup_with_the_server_stopped_and_restore_refuses_what_is_not_a_good_backup(tmp_path: Path):
    s = Server(tmp_path, SEED_SPEC)
    s.start()
    try:
        s.submit(name="one", team="john", command=["true"])
        s.wait_state("one", "Succeeded")
    finally:
        s.kill(signal.SIGTERM)
    good = tmp_path / "good.db"
    r = s.cli("backup", str(good))
    assert f"from {s.home / 'fairpod.db'}" in r.stdout and "1 jobs" in r.stdout
    db = s.home / "fairpod.db"
    before = db.read_bytes()
    bad = {"text.db": b"just some text\n" * 10}
    newer = tmp_path / "newer.db"
    newer.write_bytes(good.read_bytes())
    with sqlite3.connect(newer) as c:
        c.execute("UPDATE alembic_version SET version_num = '9999'")
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as c:
        c.execute("CREATE TABLE t (x)")
    cut = tmp_path / "cut.db"
    cut.write_bytes(good.read_bytes()[: max(4096, good.stat().st_size // 2)])
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
    cases = {tmp_path / "text.db": "not a SQLite database", newer: "newer fairpod", other: "not fairpod's",
             cut: "", tmp_path / "missing.db": "no backup file"}
    for path, why in cases.items():
        r = s.cli("restore", str(path), check=False)
        assert r.returncode == 1 and why in r.stderr, (path, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        assert db.read_bytes() == before, path  # the database is untouched
    assert not [p for p in s.home.iterdir() if "before-restore" in p.name]
    os.remove(db)
    r = s.cli("restore", str(good))
    assert "restored 1 jobs" in r.stdout and "kept at" not in r.stdout
