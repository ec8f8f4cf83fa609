"""Backups of a SQLite store: an online copy while the server runs, checked before a restore.

``backup`` uses SQLite's online backup API, so the copy is one consistent state of the database even while the
control plane writes (WAL included). ``check`` opens a file read-only and says what it is (or why it is not a
fairpod database this fairpod can use); ``restore`` puts a checked backup in place of the database, keeping the
database it replaces. PostgreSQL databases are backed up with ``pg_dump`` (see ``pg_dump_hint``).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from fairpod.store.checks import is_sqlite
from fairpod.store.records import StoreError
from fairpod.store.schema import HEAD, VERSION_TABLE, known_revisions

SIDE_FILES = ("-wal", "-shm", "-journal")


@dataclass(frozen=True, slots=True)
class BackupInfo:
    path: Path
    revision: str
    jobs: int
    unfinished_jobs: int
    bytes: int

    def describe(self) -> str:
        return (f"{self.jobs} jobs ({self.unfinished_jobs} unfinished), schema revision {self.revision}, "
                f"{self.bytes / 2**20:.1f} MiB")


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite database URL; None for other databases and in-memory SQLite."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database).expanduser()


def pg_dump_hint(url: str) -> str:
    u = make_url(url).set(drivername="postgresql")
    return (f"the database is {u.get_backend_name()}: back it up with "
            f"pg_dump --format=custom --file=FILE '{u.render_as_string(hide_password=True)}' "
            "(and restore with pg_restore --clean)")


def backup(db: Path, dest: Path) -> BackupInfo:
    """Copy the live database ``db`` to ``dest`` (mode 0600), consistently, while others may write to it."""
    if not db.is_file():
        raise StoreError(f"no database at {db}")
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    try:
        src = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        try:
            out = sqlite3.connect(tmp)
            try:
                src.backup(out, pages=4096, sleep=0.005)  # in steps: writers are not held up for the whole copy
                out.execute("PRAGMA journal_mode = DELETE")  # one file: no -wal/-shm beside the copy or its readers
            finally:
                out.close()
        finally:
            src.close()
        info = check(tmp)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return BackupInfo(dest, info.revision, info.jobs, info.unfinished_jobs, info.bytes)


def check(path: Path) -> BackupInfo:
    """What the file ``path`` holds, if it is a whole fairpod database this fairpod can open; else StoreError
    with the reason in one line."""
    try:
        sqlite = is_sqlite(path)
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror or e}") from None
    if not sqlite:
        raise StoreError(f"{path} is not a SQLite database (a PostgreSQL dump is restored with pg_restore)")
    created = [s for s in SIDE_FILES if not Path(f"{path}{s}").exists()]
    try:
        return _check(path)
    finally:
        for s in created:  # a read-only look at a WAL database leaves -wal/-shm files: ours, removed
            Path(f"{path}{s}").unlink(missing_ok=True)


def _check(path: Path) -> BackupInfo:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise StoreError(f"cannot open {path}: {e}") from None
    try:
        ok = con.execute("PRAGMA integrity_check").fetchone()
        if not ok or ok[0] != "ok":
            raise StoreError(f"{path} is damaged (SQLite integrity check: {ok[0] if ok else 'no answer'})")
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "jobs" not in tables:
            raise StoreError(f"{path} is a SQLite database but not fairpod's (it has no jobs table)")
        rev = None
        if VERSION_TABLE in tables:
            row = con.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()
            rev = row[0] if row else None
        rev = rev or ("0002" if "submit_keys" in tables else "0001")
        if rev != HEAD and rev not in known_revisions():
            raise StoreError(f"{path} has schema revision {rev}, written by a newer fairpod; this fairpod knows up "
                             f"to {HEAD}")
        jobs = con.execute("SELECT count(*) FROM jobs").fetchone()[0]
        unfinished = con.execute(
            "SELECT count(*) FROM jobs WHERE state NOT IN ('Succeeded', 'Failed', 'Cancelled')").fetchone()[0]
    except sqlite3.Error as e:
        raise StoreError(f"{path} cannot be read as a fairpod database: {e}") from None
    finally:
        con.close()
    return BackupInfo(path, str(rev), int(jobs), int(unfinished), path.stat().st_size)


def restore(src: Path, db: Path) -> tuple[BackupInfo, Path | None]:
    """Put the backup ``src`` in place of the database ``db`` (the server must be stopped). The database it
    replaces, if any, is moved to ``<db>.before-restore-<time>``; returns what was restored and that path."""
    info = check(src)
    kept: Path | None = None
    stamp = time.strftime("%Y%m%dT%H%M%S")
    tmp = db.with_name(f".{db.name}.restore.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        if db.exists():
            kept = db.with_name(f"{db.name}.before-restore-{stamp}")
            try:
                chk = sqlite3.connect(db)  # fold the WAL into the file so the kept copy is whole
                try:
                    chk.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                finally:
                    chk.close()
            except sqlite3.Error:
                pass  # not a usable database (empty, damaged): kept as it is
            os.replace(db, kept)
        for side in ("-wal", "-shm", "-journal"):
            Path(f"{db}{side}").unlink(missing_ok=True)
        os.replace(tmp, db)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return BackupInfo(db, info.revision, info.jobs, info.unfinished_jobs, info.bytes), kept


def attempts_in(path: Path) -> dict[str, tuple[int, str]]:
    """``{"<name>-<id>": (attempt, state)}`` of every job in the database file ``path`` (read-only)."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return {f"{name}-{jid}": (int(attempt), str(st))
                for jid, name, attempt, st in con.execute("SELECT id, name, attempt, state FROM jobs")}
    except sqlite3.Error as e:
        raise StoreError(f"{path} cannot be read as a fairpod database: {e}") from None
    finally:
        con.close()

