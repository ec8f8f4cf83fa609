"""The database schema's version: bring any fairpod database up to this fairpod's schema at start-up.

Four cases, in ``migrate``:
1. an empty database: create the tables as ``fairpod.store.tables`` declares them and stamp the newest revision
   (in Alembic's version table, written without importing Alembic: ``_stamp_new``);
2. a database at the newest revision: nothing to do (one small query, no Alembic import);
3. a database at an older revision, or one made before fairpod used Alembic (tables, no ``alembic_version``;
   its revision is read from which tables it has): run the migrations up to the newest;
4. a database written by a newer fairpod (a revision this one does not know): refuse with ``StoreError``.
Everything runs in one write transaction, so two servers starting at once on SQLite queue instead of both
migrating, and a failed migration leaves the database as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    inspect,
    text,
)

from fairpod.store import lease as _lease  # noqa: F401 - its tables are part of the schema
from fairpod.store.db import WRITE_OPTION
from fairpod.store.records import StoreError
from fairpod.store.tables import Base

HEAD = "0016"  # the newest revision in fairpod/store/migrations/versions (a test checks they agree)
SCRIPTS = str(Path(__file__).with_name("migrations"))  # the Alembic script directory
VERSION_TABLE = "alembic_version"


def _config(conn: Connection) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", SCRIPTS)
    cfg.attributes["connection"] = conn
    return cfg


def revision_of(conn: Connection) -> str | None:
    """The database's schema revision: ``None`` when it is empty; pre-Alembic databases are recognised."""
    tables = set(inspect(conn).get_table_names())
    if VERSION_TABLE in tables:
        row = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).first()
        if row is not None:
            return str(row[0])
    if "jobs" not in tables:
        return None
    return "0002" if "submit_keys" in tables else "0001"  # made by create_all before migrations existed


def known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    return {r.revision for r in ScriptDirectory(SCRIPTS).walk_revisions()}


def _stamp_new(conn: Connection) -> None:
    """Mark a new database as at ``HEAD`` as ``alembic stamp`` does, in Alembic's own version table
    (alembic.runtime.migration: ``version_num VARCHAR(32) NOT NULL``, primary key ``alembic_version_pkc``), without
    importing Alembic and reading every migration script: every new home pays this at its first start."""
    table = Table(VERSION_TABLE, MetaData(), Column("version_num", String(32), nullable=False),
                  PrimaryKeyConstraint("version_num", name=f"{VERSION_TABLE}_pkc"))
    table.create(conn)
    conn.execute(table.insert().values(version_num=HEAD))


def migrate(engine: Engine) -> str:
    """Bring the database to ``HEAD`` (see the module's doc). Returns the revision it was at before
    (``"empty"`` for a new database)."""
    with engine.execution_options(**{WRITE_OPTION: True}).begin() as conn:
        before = revision_of(conn)
        if before == HEAD:
            return before
        if before is None:
            Base.metadata.create_all(conn)
            _stamp_new(conn)
            return "empty"
        from alembic import command

        if before not in known_revisions():
            raise StoreError(f"the database has schema revision {before}, written by a newer fairpod; this "
                             f"fairpod knows up to {HEAD}: upgrade fairpod (or restore a backup made by this one)")
        cfg = _config(conn)
        if VERSION_TABLE not in inspect(conn).get_table_names():
            command.stamp(cfg, before)
        command.upgrade(cfg, HEAD)
        return before
