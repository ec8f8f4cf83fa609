"""``GET /admin/backup``: an online copy of the SQLite database, for ``fairpod backup`` (admins only)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from fairpod.server.access.auth import Auth, require_admin
from fairpod.server.core.api import Core
from fairpod.server.errors import Problem
from fairpod.store import StoreError
from fairpod.store.backup import backup, pg_dump_hint, sqlite_path


def add_routes(api: APIRouter, cp: Core) -> None:
    @api.get("/admin/backup", tags=["admin"], response_class=FileResponse,
             responses={200: {"content": {"application/vnd.sqlite3": {}},
                              "description": "a consistent copy of the SQLite database"}})
    def get_backup(p: Auth) -> FileResponse:
        """A consistent copy of the database while the server runs (SQLite; PostgreSQL: use pg_dump)."""
        require_admin(p)
        db = sqlite_path(cp.queries.url)
        if db is None:
            raise Problem(409, "backup not available here", pg_dump_hint(cp.queries.url)
                          if not cp.queries.url.startswith("sqlite") else "the database is in memory")
        fd, name = tempfile.mkstemp(prefix=".backup-", suffix=".db", dir=cp.home)
        os.close(fd)
        tmp = Path(name)
        try:
            info = backup(db, tmp)
        except StoreError as e:
            tmp.unlink(missing_ok=True)
            raise Problem(500, "backup failed", str(e)) from None
        cp.audit(p.name, "backup", str(db), {"jobs": info.jobs, "revision": info.revision})
        return FileResponse(tmp, media_type="application/vnd.sqlite3", filename="fairpod-backup.db",
                            headers={"X-Fairpod-Jobs": str(info.jobs), "X-Fairpod-Schema-Revision": info.revision},
                            background=BackgroundTask(tmp.unlink, missing_ok=True))
