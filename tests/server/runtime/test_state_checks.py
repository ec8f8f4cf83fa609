"""``fairpod up`` on a state directory it must not use: a database that is not a healthy fairpod one, a
read-only FAIRPOD_HOME; and the files a killed backup left, removed at the next ``up``."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest

from ..conftest import SEED_SPEC, Server


def _refused(s: Server, what: str) -> str:
    r = s.cli("up", "--port", str(s.port), check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert what in lines[0], lines[0]
    assert "fairpod is up" not in r.stdout
    return lines[0]


def _real_database(s: Server) -> bytes:
    s.start()
    try:
        s.submit(name="one", team="john", command=["true"])
        s.wait_state("one", "Succeeded")
    finally:
        s.kill(signal.SIGTERM)
    return (s.home / "fairpod.db").read_bytes()


@pytest.mark.parametrize("kind", ["empty", "garbage", "truncated", "other-program"])
def test_up_refuses_a_database_that_is_not_a_healthy_fairpod_one_and_touches_nothing(tmp_path: Path, kind: str):
    s = Server(tmp_path, SEED_SPEC)
    db = s.home / "fairpod.db"
    config = Path(s.env["FAIRPOD_CONFIG"])
    if kind == "empty":
        s.home.mkdir(parents=True)
        db.write_bytes(b"")
        what = "is empty (0 bytes)"
    elif kind == "garbage":
        s.home.mkdir(parents=True)
        db.write_bytes(os.urandom(8192))
        what = "is not a SQLite database"
    elif kind == "truncated":
        whole = _real_database(s)
        db.write_bytes(whole[: len(whole) // 2])
        for side in ("-wal", "-shm"):
            Path(f"{db}{side}").unlink(missing_ok=True)
        what = "cannot be read as a fairpod database"
    else:
        s.home.mkdir(parents=True)
        with sqlite3.connect(db) as c:
            c.execute("CREATE TABLE t (x)")
        what = "not fairpod's"
    config.write_text('{"url": "http://127.0.0.1:1", "token": "the admin token of before"}')
    before = {p.name: p.read_bytes() for p in s.home.iterdir() if p.is_file() and p.name != "server.pid"}
    line = _refused(s, what)
    assert str(db) in line
    assert {p.name: p.read_bytes() for p in s.home.iterdir() if p.is_file() and p.name != "server.pid"} == before  # nothing created, nothing replaced
    assert config.read_text() == '{"url": "http://127.0.0.1:1", "token": "the admin token of before"}'


def _mount_tmpfs(where: Path, options: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a file system of the test's own needs root")
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")


def test_up_on_a_read_only_home_says_so_in_one_line(tmp_path: Path):
    s = Server(tmp_path, SEED_SPEC)
    _mount_tmpfs(s.home, "size=1m,ro")
    try:
        line = _refused(s, "read-only file system")
        assert str(s.home) in line
    finally:
        subprocess.run(["umount", str(s.home)], check=True)
    assert not Path(s.env["FAIRPOD_CONFIG"]).exists()


def test_up_removes_the_files_a_killed_backup_left_in_the_home(tmp_path: Path):
    s = Server(tmp_path, SEED_SPEC)
    _real_database(s)
    left = [".backup-k2j3h4.db", ".backup-k2j3h4.db-wal", "..backup-abc.db.4242.tmp", "..backup-abc.db.4242.tmp-shm",
            "..backup-abc.db.4242.tmp-wal", ".fairpod.db.restore.tmp"]
    for name in left:
        (s.home / name).write_bytes(b"x" * 100)
    (s.home / "notes.db").write_bytes(b"mine")  # not fairpod's temporary file: kept
    s.start()
    try:
        assert s.job("one")["state"] == "Succeeded"
        assert not [n for n in left if (s.home / n).exists()]
        assert (s.home / "notes.db").read_bytes() == b"mine"
    finally:
        s.kill(signal.SIGTERM)
