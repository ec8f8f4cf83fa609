"""Checks of the state directory before the server uses it, and the clean-up of what a killed copy left.

``check_database`` decides whether ``fairpod up`` may open a SQLite file: a database is created only where no
file exists; a file that is there must be a healthy fairpod database (SQLite, not damaged, with fairpod's
tables, of a schema this fairpod knows), else ``StoreError`` with the reason in one line and nothing touched.
``check_writable`` tells a read-only or foreign-owned ``FAIRPOD_HOME`` in one line. ``clean_leftovers``
removes the temporary files of backups and restores that a killed process left in ``FAIRPOD_HOME``; it runs
only while no server uses that home.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import tempfile
from contextlib import suppress
from pathlib import Path

from fairpod.store.records import StoreError
from fairpod.store.schema import HEAD, VERSION_TABLE, known_revisions

SQLITE_MAGIC = b"SQLite format 3\x00"
SIDE_FILES = ("-wal", "-shm", "-journal")
# temporary files of a backup or restore (fairpod.store.backup, fairpod.server.api.routes_backup) in FAIRPOD_HOME
LEFTOVER_PATTERNS = (".backup-*.db", ".backup-*.db-*", "..backup-*.db.*.tmp", "..backup-*.db.*.tmp-*",
                     ".fairpod.db.restore.tmp", ".fairpod.db.restore.tmp-*")

def is_sqlite(path: Path) -> bool:
    """Whether the file ``path`` begins as a SQLite database does (OSError when it cannot be read)."""
    with open(path, "rb") as f:
        return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC


_WHAT_TO_DO = "move it away, or put a backup in its place with 'fairpod restore FILE'"


def check_database(path: Path) -> None:
    """Nothing when ``path`` does not exist (a new database is created there) or is a healthy fairpod database
    this fairpod can open; else StoreError in one line. Reads only."""
    try:
        st = path.stat()
    except FileNotFoundError:
        if any(Path(f"{path}{s}").exists() for s in ("-wal", "-journal")):
            raise StoreError(f"{path} is missing but its journal {path.name}-wal/-journal is there: the database "
                             f"was moved or deleted; {_WHAT_TO_DO}") from None
        return
    except OSError as e:
        raise StoreError(f"cannot read the database {path}: {e.strerror or e}") from None
    if not path.is_file():
        raise StoreError(f"the database {path} is not a regular file; {_WHAT_TO_DO}")
    if st.st_size == 0:
        raise StoreError(f"the database {path} is empty (0 bytes), not a fairpod database; {_WHAT_TO_DO}")
    try:
        sqlite = is_sqlite(path)
    except OSError as e:
        raise StoreError(f"cannot read the database {path}: {e.strerror or e}") from None
    if not sqlite:
        raise StoreError(f"the database {path} is not a SQLite database ({st.st_size} bytes of something else); "
                         f"{_WHAT_TO_DO}")
    created = [s for s in SIDE_FILES if not Path(f"{path}{s}").exists()]
    try:
        _check_open(path)
    finally:
        for s in created:  # a read-only look at a WAL database may leave empty side files: ours, removed
            side = Path(f"{path}{s}")
            with suppress(OSError):
                if side.stat().st_size == 0 or s == "-shm":
                    side.unlink()


def _check_open(path: Path) -> None:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error as e:
        raise StoreError(f"cannot open the database {path}: {e}; {_WHAT_TO_DO}") from None
    try:
        ok = con.execute("PRAGMA quick_check").fetchone()
        if not ok or ok[0] != "ok":
            raise StoreError(f"the database {path} is damaged (SQLite: {ok[0] if ok else 'no answer'}); "
                             f"{_WHAT_TO_DO}")
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "jobs" not in tables:
            raise StoreError(f"{path} is a SQLite database but not fairpod's (it has no jobs table); {_WHAT_TO_DO}")
        if VERSION_TABLE in tables:
            row = con.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()
            rev = row[0] if row else None
            if rev is not None and rev != HEAD and rev not in known_revisions():
                raise StoreError(f"the database {path} has schema revision {rev}, written by a newer fairpod; this "
                                 f"fairpod knows up to {HEAD}")
        con.execute("SELECT count(*) FROM jobs").fetchone()
    except sqlite3.Error as e:
        raise StoreError(f"the database {path} cannot be read as a fairpod database ({e}); {_WHAT_TO_DO}") from None
    finally:
        con.close()


def check_writable(home: Path) -> None:
    """StoreError in one line unless fairpod can create its home and write files in it."""
    try:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, name = tempfile.mkstemp(prefix=".write-check-", dir=home)
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        why = "it is on a read-only file system" if e.errno == errno.EROFS else (
            "no space left on its file system" if e.errno == errno.ENOSPC else (e.strerror or str(e)))
        raise StoreError(f"cannot write to FAIRPOD_HOME {home}: {why}") from None


def clean_leftovers(home: Path) -> list[Path]:
    """Remove the temporary files of backups and restores that a killed process left in ``home`` (call only
    while no server runs there); returns what was removed."""
    gone: list[Path] = []
    for pattern in LEFTOVER_PATTERNS:
        for p in home.glob(pattern):
            with suppress(OSError):
                if p.is_file():
                    p.unlink()
                    gone.append(p)
    return gone
