"""A database of schema version 1 (the column ``jobs.exit_info``) is upgraded in place to version 2
(``jobs.run_state``) when the store opens it, keeping what the column held."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fairpod.model.jobs import JobSpec, resolve_job
from fairpod.model.spec import seed_spec
from fairpod.store import Store
from fairpod.store.tables import SCHEMA_VERSION


def test_version_1_is_upgraded_in_place(tmp_path: Path) -> None:
    db = tmp_path / "fairpod.db"
    spec = seed_spec()
    with Store(f"sqlite:///{db}") as store:
        store.create_all()
        store.put_spec(spec)
        js = JobSpec(name="j", team="john", command=["true"])
        job = store.insert_job(js, resolve_job(js, spec))
        store.update_job(job.id, {"run_state": {"attempt": 0, "launched": True}})
    con = sqlite3.connect(db)  # as fairpod of schema version 1 left it
    con.execute("ALTER TABLE jobs RENAME COLUMN run_state TO exit_info")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    with Store(f"sqlite:///{db}") as store:
        store.create_all()
        assert store.get_job(job.id).run_state == {"attempt": 0, "launched": True}
    con = sqlite3.connect(db)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (str(SCHEMA_VERSION),)
    assert "exit_info" not in [r[1] for r in con.execute("PRAGMA table_info(jobs)")]
    con.close()
