"""The control plane on PostgreSQL: the same server, a database URL instead of the SQLite file."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.store.conftest import pg_url, wipe  # noqa: F401  (the fixture: a real PostgreSQL server)

from ..conftest import Server


def test_server_runs_jobs_on_postgresql_and_keeps_them_across_a_restart(tmp_path: Path, pg_url: str):  # noqa: F811
    from fairpod.store import Store

    s0 = Store(pg_url)
    wipe(s0.engine)
    s0.close()
    s = Server(tmp_path)
    s.db = pg_url
    s.start()
    try:
        s.submit(name="pg-job", team="john", nodes=2, command=["sh", "-c", "echo on postgres"])
        done = s.wait_state("pg-job", "Succeeded", 30)
        assert done["reason"] == "all replicas exited 0"
        s.kill(signal.SIGKILL)
        s.start()
        assert s.job("pg-job")["state"] == "Succeeded"
        assert "on postgres" in s.cli("get-logs", "pg-job").stdout
        assert not (s.home / "fairpod.db").exists()
        r = s.cli("backup", str(tmp_path / "pg.db"), check=False)  # SQLite's online backup does not apply
        assert r.returncode == 1 and "pg_dump --format=custom" in r.stderr and len(r.stderr.splitlines()) == 1
        assert not (tmp_path / "pg.db").exists()
    finally:
        s.kill(signal.SIGTERM)
        s.kill_replicas()
