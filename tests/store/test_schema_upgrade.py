"""A database of the revision before ``jobs.exit_info`` was renamed ``run_state`` is upgraded in place when the store
opens it, keeping what the column held."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from fairpod.model.jobs import JobSpec, resolve_job
from fairpod.model.spec import seed_spec
from fairpod.store import Store
from fairpod.store.schema import HEAD


def _back_to_0006(con: sqlite3.Connection) -> None:
    """Undo 0016 (an index), 0015 (the jobs' incarnation), 0014 (the rollups and an index), 0013 (an index), 0012 (the lease tables)
    and 0007 (the array columns) by hand, as a database of revision 0006 has its tables."""
    con.execute("DROP INDEX ix_jobs_unfinished_state_team")
    con.execute("ALTER TABLE jobs DROP COLUMN incarnation")
    con.execute("DROP TABLE usage_rollups")
    con.execute("DROP INDEX ix_usage_ts")
    con.execute("DROP INDEX ix_jobs_first_started_at")
    con.execute("DROP TABLE ha_lease")
    con.execute("DROP TABLE ha_members")
    con.execute("DROP INDEX ix_jobs_array_id")
    con.execute("ALTER TABLE jobs DROP COLUMN array_limit")
    con.execute("ALTER TABLE jobs DROP COLUMN array_id")
    con.execute("UPDATE alembic_version SET version_num = '0006'")


def _stored(db: Path, jobs: list[JobSpec], changes: dict[str, Any] | None = None) -> list[int]:
    """A new store at the newest revision holding ``jobs`` (each with ``changes``); their ids."""
    spec = seed_spec()
    with Store(f"sqlite:///{db}") as store:
        store.create_all()
        store.put_spec(spec)
        ids = [store.insert_job(js, resolve_job(js, spec)).id for js in jobs]
        for jid in ids if changes else []:
            store.update_job(jid, changes or {})
    return ids


def test_the_exit_info_column_is_renamed_in_place(tmp_path: Path) -> None:
    db = tmp_path / "fairpod.db"
    (jid,) = _stored(db, [JobSpec(name="j", team="john", command=["true"])],
                     {"run_state": {"attempt": 0, "launched": True}})
    con = sqlite3.connect(db)  # as fairpod at revision 0005 left it
    _back_to_0006(con)
    con.execute("ALTER TABLE jobs RENAME COLUMN run_state TO exit_info")
    con.execute("UPDATE alembic_version SET version_num = '0005'")
    con.commit()
    con.close()
    with Store(f"sqlite:///{db}") as store:
        store.create_all()
        assert store.get_job(jid).run_state == {"attempt": 0, "launched": True}
    con = sqlite3.connect(db)
    assert con.execute("SELECT version_num FROM alembic_version").fetchone() == (HEAD,)
    assert "exit_info" not in [r[1] for r in con.execute("PRAGMA table_info(jobs)")]
    con.close()


def test_the_tasks_of_an_array_get_its_id_and_throttle_as_columns(tmp_path: Path) -> None:
    db = tmp_path / "fairpod.db"
    envs = ({"FAIRPOD_ARRAY_JOB_ID": "7", "FAIRPOD_ARRAY_TASK_LIMIT": "2"}, {"FAIRPOD_ARRAY_JOB_ID": "7"}, {"OTHER": "1"})
    ids = _stored(db, [JobSpec(name=f"j-{i}", team="john", command=["true"], env=env) for i, env in enumerate(envs)])
    con = sqlite3.connect(db)  # as fairpod at revision 0006 left it: the array only in the tasks' env
    _back_to_0006(con)
    con.commit()
    con.close()
    with Store(f"sqlite:///{db}") as store:
        store.create_all()
        got = [(j.array_id, j.array_limit) for j in map(store.get_job, ids) if j is not None]
    assert got == [(7, 2), (7, None), (None, None)]
