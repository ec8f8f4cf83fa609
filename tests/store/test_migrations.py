"""Schema migrations: every database fairpod ever made comes up to the newest schema with its data, on
SQLite and PostgreSQL, and the migrated schema is exactly what ``fairpod.store.tables`` declares."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text

from fairpod.model.spec import ClusterSpec
from fairpod.store import Store, StoreError
from fairpod.store.schema import HEAD, SCRIPTS, _config, revision_of
from fairpod.store.tables import Base

from .conftest import wipe
from .helpers import submit


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fairpod.db'}"
        return
    pg = request.getfixturevalue("pg_url")
    s = Store(pg)
    wipe(s.engine)
    s.close()
    yield pg


def upgrade_to(engine: Engine, rev: str) -> None:
    with engine.begin() as conn:
        command.upgrade(_config(conn), rev)


def release_1_rows(engine: Engine) -> None:
    """What a server of the first release wrote: a spec, a finished job with an event, a user with a token,
    a usage sample (the tables as revision 0001 made them, written with plain SQL)."""
    now = time.time()
    with engine.begin() as c:
        c.execute(text("INSERT INTO cluster (id, spec, version, updated_at) VALUES (1, :s, 1, :t)"),
                  {"s": '{"cluster": {"name": "old"}}', "t": now})
        c.execute(text(
            "INSERT INTO jobs (name, team, spec, state, reason, priority, instance_type, nodes, acc, mcpu, mib,"
            " submit_time, seq, attempt, max_retry, auto_resume, placement, borrowed_from, preemptions,"
            " exit_info, updated_at, finished_at) VALUES ('old-job', 'john', :spec, 'Succeeded', 'exit 0', 50,"
            " 'ml.p5.48xlarge', 1, 8, 0, 0, :t, 7, 0, 0, false, '[]', '{}', 0, NULL, :t, :t)"),
            {"spec": '{"name": "old-job", "team": "john", "command": ["true"]}', "t": now})
        c.execute(text("INSERT INTO events (ts, kind, job_id, team, message, data) VALUES "
                       "(:t, 'JobSucceeded', (SELECT id FROM jobs WHERE name = 'old-job'), 'john', 'old-job done', '{}')"), {"t": now})
        c.execute(text("INSERT INTO users (name, role, teams, created_at) VALUES ('ann', 'member', '[\"john\"]', :t)"),
                  {"t": now})
        c.execute(text("INSERT INTO counters (name, value) VALUES ('job_seq', 7)"))


def schema_diff(engine: Engine) -> list:
    with engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), Base.metadata)


def test_head_is_the_newest_revision_and_history_is_linear():
    script = ScriptDirectory(SCRIPTS)
    assert script.get_heads() == [HEAD]
    revs = list(script.walk_revisions("base", "heads"))
    assert [r.down_revision for r in reversed(revs)][0] is None
    assert len({r.revision for r in revs}) == len(revs)


def test_a_new_database_is_made_at_the_newest_revision_exactly_as_declared(url: str):
    s = Store(url)
    s.create_all()
    s.create_all()  # again: nothing to do
    with s.engine.connect() as conn:
        assert revision_of(conn) == HEAD
    assert schema_diff(s.engine) == []
    s.close()


def _version_table(engine: Engine) -> tuple:
    """The version table as the database has it: columns, primary key and its name, what Alembic reads there."""
    with engine.connect() as conn:
        i = inspect(conn)
        cols = [(c["name"], str(c["type"]), c["nullable"]) for c in i.get_columns("alembic_version")]
        pk = i.get_pk_constraint("alembic_version")
        return cols, pk["constrained_columns"], pk["name"], MigrationContext.configure(conn).get_current_revision()


def test_a_new_database_is_stamped_as_alembic_stamps_it(url: str, tmp_path):
    """A new database's version table is written without Alembic (fairpod.store.schema._stamp_new): it is the
    table ``alembic stamp`` makes, and Alembic reads the newest revision from it."""
    s = Store(url)
    s.create_all()
    ours = _version_table(s.engine)
    if url.startswith("postgresql"):  # one server: Alembic stamps it again once emptied
        wipe(s.engine)
    s.close()
    t = Store(url if url.startswith("postgresql") else f"sqlite:///{tmp_path / 'stamped.db'}")
    with t.engine.begin() as conn:
        command.stamp(_config(conn), HEAD)
    theirs = _version_table(t.engine)
    t.close()
    assert ours == theirs and ours[-1] == HEAD, (ours, theirs)


def test_the_first_schema_migrates_to_the_newest_with_its_data(url: str, cluster: ClusterSpec):
    s = Store(url)
    upgrade_to(s.engine, "0001")
    release_1_rows(s.engine)
    s.create_all()  # what `fairpod up` does
    with s.engine.connect() as conn:
        assert revision_of(conn) == HEAD
        assert "submit_keys" in inspect(conn).get_table_names()
    assert schema_diff(s.engine) == [], "migrations and fairpod.store.tables disagree: add a migration"
    (job,) = s.list_jobs()
    assert job.name == "old-job" and job.state == "Succeeded"
    assert [e.message for e in s.list_events(job_id=job.id)] == ["old-job done"]
    assert s.get_user("ann") is not None
    assert [(v.version, v.action) for v in s.spec_history()] == [(1, "spec.apply")]  # the spec in force
    new = submit(s, cluster, name="new-job", command=["true"])  # the migrated store takes new work
    assert new.id > job.id and new.seq > job.seq
    s.close()


def test_a_database_made_before_migrations_is_recognised_and_migrated(url: str):
    s = Store(url)
    upgrade_to(s.engine, "0001")  # create_all of the first release made exactly these tables ...
    release_1_rows(s.engine)
    with s.engine.begin() as c:  # ... and no alembic_version table
        c.execute(text("DROP TABLE alembic_version"))
    with s.engine.connect() as conn:
        assert revision_of(conn) == "0001"
    s.create_all()
    with s.engine.connect() as conn:
        assert revision_of(conn) == HEAD
    assert schema_diff(s.engine) == []
    assert [j.name for j in s.list_jobs()] == ["old-job"]
    s.close()


def test_every_migration_goes_down_and_up_again(url: str):
    s = Store(url)
    s.create_all()
    with s.engine.begin() as conn:
        command.downgrade(_config(conn), "base")
    with s.engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) <= {"alembic_version"}
    upgrade_to(s.engine, "head")
    assert schema_diff(s.engine) == []
    s.close()


def test_a_database_from_a_newer_fairpod_is_refused_untouched(url: str, cluster: ClusterSpec):
    s = Store(url)
    s.create_all()
    submit(s, cluster, name="keep-me", command=["true"])
    with s.engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(StoreError, match="revision 9999, written by a newer fairpod"):
        Store(url).create_all()
    assert [j.name for j in s.list_jobs()] == ["keep-me"]
    s.close()


def test_a_start_on_a_new_or_current_database_does_not_import_alembic(tmp_path):
    """Alembic and the migration scripts are read only when there is something to migrate: every ``fairpod up``
    of a new home, and every restart, paid ~0.15 CPU-s for them."""
    code = ("import sys; from fairpod.store import Store; s = Store(sys.argv[1]); s.create_all(); s.create_all(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))")
    out = subprocess.run([sys.executable, "-c", code, f"sqlite:///{tmp_path / 'fairpod.db'}"], capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout
