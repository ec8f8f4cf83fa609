"""``fairpod backup`` and ``fairpod restore``: a consistent copy of the database, and putting one back."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fairpod.cli.errors import CliError
from fairpod.cli.output import add_output, emit_json

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser(
        "backup", help="copy the database to a file (while the server runs)",
        description="Write a consistent copy of fairpod's SQLite database to FILE (mode 0600). With the server "
        "running the copy comes from it (admins only), at any moment and without stopping jobs; with the server "
        "stopped it is made from $FAIRPOD_HOME/fairpod.db. A PostgreSQL database is backed up with pg_dump (the "
        "error says the exact command). Restore with 'fairpod restore FILE'.")
    b.add_argument("file", metavar="FILE", help="where to write the backup")
    b.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    add_output(b)
    b.set_defaults(func=cmd_backup)
    r = sub.add_parser(
        "restore", help="put a backup in place of the database (server stopped)",
        description="Replace $FAIRPOD_HOME/fairpod.db with the backup FILE after checking it is a whole fairpod "
        "database this version can use. The server must be stopped ('fairpod down'); the database it replaces "
        "is kept beside it as fairpod.db.before-restore-<time>. On the next 'fairpod up' the backup's schema is "
        "migrated if it is older, and jobs that were running when it was made are resumed or failed as after a "
        "crash (auto-resume decides).")
    r.add_argument("file", metavar="FILE", help="a file written by 'fairpod backup'")
    add_output(r)
    r.set_defaults(func=cmd_restore)


def _home() -> Path:
    return Path(os.environ.get("FAIRPOD_HOME") or Path.home() / ".local/share/fairpod").absolute()


def _info(info: Any) -> dict[str, Any]:
    return {"file": str(info.path), "jobs": info.jobs, "unfinished_jobs": info.unfinished_jobs,
            "schema_revision": info.revision, "bytes": info.bytes}


def cmd_backup(a: argparse.Namespace) -> int:
    from fairpod.cli.client import Client
    from fairpod.store import StoreError
    from fairpod.store.backup import backup, check

    dest = Path(a.file).expanduser().absolute()
    if dest.exists() and not a.force:
        raise CliError(f"{dest} exists: give another FILE or --force to overwrite it")
    if not dest.parent.is_dir():
        raise CliError(f"no directory {dest.parent} for the backup")
    _remove_stale_parts(dest.parent)
    part = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    source = "the server"
    import signal

    def _stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # a killed backup leaves no .part behind (see the except below)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for chunk in Client(timeout=600).stream("/admin/backup"):
                os.write(fd, chunk)
        finally:
            os.close(fd)
        info = check(part)
        os.replace(part, dest)
        info = type(info)(dest, info.revision, info.jobs, info.unfinished_jobs, info.bytes)
    except CliError as e:
        part.unlink(missing_ok=True)
        if "cannot reach" not in str(e):
            raise
        db = _home() / "fairpod.db"
        if not db.is_file():
            raise CliError(f"{e}; and there is no database at {db} to copy") from None
        source = str(db)
        try:
            info = backup(db, dest)
        except StoreError as e2:
            raise CliError(f"backup failed: {e2}") from None
    except (StoreError, OSError) as e:
        part.unlink(missing_ok=True)
        raise CliError(f"backup failed: {e}") from None
    except BaseException:  # interrupted (Ctrl-C, SIGTERM)
        part.unlink(missing_ok=True)
        raise
    if a.output == "json":
        emit_json({**_info(info), "source": source})
    else:
        print(f"backed up {info.describe()} from {source} to {dest}")
    return 0


def _refuse_unknown_replicas(home: Path, src: Path) -> None:
    """Refuse a restore while replicas run that the backup does not know as running (jobs submitted or restarted
    after it was made): the restored control plane would leave them unmanaged and give their accelerators to
    other jobs."""
    from fairpod.executors.live import live_replicas
    from fairpod.store import StoreError
    from fairpod.store.backup import attempts_in, check

    live = live_replicas(home / "runs")
    if not live:
        return
    try:
        check(src)
        known = attempts_in(src)
    except StoreError as e:
        raise CliError(f"not restored: {e}") from None
    unknown = sorted({(r.job, r.attempt) for r in live
                      if known.get(r.job, (None, ""))[0] != r.attempt or known[r.job][1] not in ("Running", "Preempted")})
    if unknown:
        shown = ", ".join(f"{job} (attempt {a})" for job, a in unknown[:5]) + (" …" if len(unknown) > 5 else "")
        raise CliError(f"not restored: {len(unknown)} running job(s) are not running in the backup: {shown}; their "
                       "replicas would run unmanaged on accelerators given to other jobs. Start the server, cancel "
                       "them or let them end, then restore")


def _remove_stale_parts(folder: Path) -> None:
    """The ``.FILE.<pid>.part`` files of backups into ``folder`` whose process is gone (killed with SIGKILL)."""
    import re

    from fairpod.executors.procs import alive

    for p in folder.glob(".*.part"):
        m = re.fullmatch(r"\..+\.(\d+)\.part", p.name)
        if m is not None and not alive(int(m.group(1)), None):
            p.unlink(missing_ok=True)


def cmd_restore(a: argparse.Namespace) -> int:
    from fairpod.server.runtime import daemon
    from fairpod.store import StoreError
    from fairpod.store.backup import restore, sqlite_path

    home = _home()
    src = Path(a.file).expanduser().absolute()
    if not src.is_file():
        raise CliError(f"no backup file {src}")
    url = daemon.db_url(home, None)
    db = sqlite_path(url)
    if db is None:
        raise CliError("the database is PostgreSQL (FAIRPOD_DB_URL): restore a pg_dump file with pg_restore --clean")
    running = daemon.read_pid(home)
    if running is not None:
        raise CliError(f"the server is running (pid {running[0]}): stop it first with 'fairpod down', then restore")
    if src == db:
        raise CliError(f"{src} is the database itself: give a backup file")
    _refuse_unknown_replicas(home, src)
    try:
        info, kept = restore(src, db)
    except (StoreError, OSError) as e:
        raise CliError(f"not restored: {e}") from None
    if a.output == "json":
        emit_json({**_info(info), "source": str(src), "previous_database": str(kept) if kept else None})
    else:
        print(f"restored {info.describe()} from {src} to {db}")
        if kept:
            print(f"the database it replaced is kept at {kept}")
        print("start the server with 'fairpod up' (an older schema is migrated on start)")
    return 0
