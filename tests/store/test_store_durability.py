"""Durability: WAL mode, and a writer killed with SIGKILL loses no committed row and leaves a sound DB."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from fairpod.model.spec import ClusterSpec
from fairpod.store import Store

from .durability_writer import BATCH
from .helpers import submit

WRITER = Path(__file__).with_name("durability_writer.py")


def test_sqlite_pragmas(store: Store, tmp_path: Path):
    with store.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
    con = sqlite3.connect(tmp_path / "fairpod.db")  # WAL is a property of the file
    assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    con.close()
    normal = Store(f"sqlite:///{tmp_path / 'other.db'}", synchronous="normal")
    with normal.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 1
    normal.close()
    with pytest.raises(ValueError):
        Store(f"sqlite:///{tmp_path / 'x.db'}", synchronous="sometimes")


def _run_and_kill(url: str, tag: str, batches: int) -> list[int]:
    """Start a writer, let it commit ``batches`` batches, SIGKILL it; return every id it reported."""
    p = subprocess.Popen([sys.executable, str(WRITER), url, tag], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    ids: list[int] = []
    try:
        for _ in range(batches):
            line = p.stdout.readline()
            assert line, f"writer exited early with {p.wait()}"
            ids += map(int, line.split())
        os.kill(p.pid, signal.SIGKILL)
        rest, _ = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == -signal.SIGKILL
    for line in rest.splitlines():  # batches reported between our last read and the kill
        ids += map(int, line.split())
    return ids


def _check_consistent(path: Path) -> None:
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
        # every transaction is whole: BATCH jobs and one event per job
        n_jobs = con.execute("SELECT count(*) FROM jobs").fetchone()[0]
        assert n_jobs % BATCH == 0
        orphans = con.execute(
            "SELECT count(*) FROM jobs j WHERE (SELECT count(*) FROM events e WHERE e.job_id = j.id) != 1"
        ).fetchone()[0]
        assert orphans == 0
    finally:
        con.close()


@pytest.mark.timeout(60)
def test_sigkill_mid_write_loses_nothing_committed(tmp_path: Path, cluster: ClusterSpec):
    path = tmp_path / "fairpod.db"
    url = f"sqlite:///{path}"
    s = Store(url)
    s.create_all()
    s.close()

    committed: list[int] = []
    for round_no in range(2):  # the second round starts on the WAL/SHM the first kill left behind
        committed += _run_and_kill(url, f"r{round_no}", batches=15)
        assert (tmp_path / "fairpod.db-wal").exists()
        _check_consistent(path)
        s = Store(url)
        s.create_all()
        present = {j.id for j in s.list_jobs()}
        assert set(committed) <= present, "a committed job was lost"
        # at most one more batch per kill so far: committed, but killed before it printed the ids (the first
        # round's such batch is still there in the second)
        extra = len(present) - len(committed)
        assert extra % BATCH == 0 and 0 <= extra <= BATCH * (round_no + 1), extra
        s.close()

    # the reopened store works normally: new jobs get fresh ids and the next seq
    s = Store(url)
    s.create_all()
    top = max(j.seq for j in s.list_jobs())
    job = submit(s, cluster, "after")
    assert job.seq == top + 1 and job.id > max(committed)
    s.close()
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    con.close()
