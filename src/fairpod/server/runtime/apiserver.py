"""``fairpod api``: an API process of its own, on any host that reaches the cluster's PostgreSQL database and its
core (docs/operations.md "API processes on other hosts", docs/architecture.md "Past one machine").

It serves what an API worker of ``fairpod up --api-workers N`` serves, with the same app
(:func:`fairpod.server.runtime.wiring.build_worker`): submit, list-jobs and get-job from the database, every other
request forwarded to the core at ``--core``. Unlike a worker it is no child of the core and does not end with it: a
submit it accepts while the core is down is committed, and the core takes it in at its first turn back
(:mod:`fairpod.server.core.foreign`, which a core on PostgreSQL always runs); a commit wakes the core through the
database (:mod:`fairpod.store.notify`), not over HTTP.

What it needs, and where from:

- the database's URL: ``FAIRPOD_DB_URL`` (or ``--db`` when the URL holds no password: a command line is every
  local user's to read; a password goes in ``~/.pgpass`` or the environment);
- the core's executor as :class:`~fairpod.executors.base.Traits` (what a submit is checked against): from the
  database, where a core on PostgreSQL writes it at each start (``wiring.TRAITS_META``);
- the job secret (``job-token.key``, which signs job tokens): a file the admin copies from
  the core's home (mode 0600), never from the database, whose readers could then forge tokens
  (:mod:`fairpod.server.access.jobtoken`). Users' tokens are the database's, as for the core.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from fairpod.executors.base import Traits
from fairpod.server.access.jobtoken import SECRET_FILE
from fairpod.server.runtime import heap
from fairpod.store import Store
from fairpod.store.records import StoreError

log = logging.getLogger("fairpod.api")


class Refused(Exception):
    """What ``fairpod api`` cannot start with, in one line (the flag or file named)."""


def database(given: str | None) -> str:
    """The PostgreSQL URL from ``--db`` (without a password) or ``FAIRPOD_DB_URL``."""
    url = given or os.environ.get("FAIRPOD_DB_URL")
    where = "--db" if given else "FAIRPOD_DB_URL"
    if not url:
        raise Refused("fairpod api needs the cluster's PostgreSQL database: set FAIRPOD_DB_URL "
                      "(postgresql+psycopg://…)")
    try:
        u = make_url(url)
    except ArgumentError:
        raise Refused(f"{where} is not a database URL (postgresql+psycopg://user@host/db)") from None
    if not u.drivername.startswith("postgresql"):
        raise Refused(f"{where}: fairpod api serves a PostgreSQL database shared with the core, not "
                      f"{u.drivername} (on one machine use fairpod up --api-workers N)")
    if given and u.password:
        raise Refused("--db holds a password, which every local user could read on the command line: put the URL "
                      "in FAIRPOD_DB_URL, or the password in ~/.pgpass")
    return url


def core_url(given: str) -> str:
    """``--core``: http(s)://host[:port] of the core (no path, query or credentials)."""
    try:
        u = urlsplit(given)
        port = u.port
    except ValueError:
        raise Refused(f"--core {given!r} is not a URL (http://HOST:PORT)") from None
    if u.scheme not in ("http", "https") or not u.hostname or u.path not in ("", "/") or u.query or u.username:
        raise Refused(f"--core {given!r}: give the core's URL as http://HOST:PORT (no path, query or user)")
    if port == 0:
        raise Refused(f"--core {given!r}: port 0 is no port to reach the core at")
    return f"{u.scheme}://{u.netloc}"


def secret(path: Path) -> bytes:
    """The job secret from ``path``: a copy of the core's ``job-token.key``, readable by this user only."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # (a FIFO or a device would block or never end a read)
            raise Refused(f"--secret-file {path}: not a regular file")
        with path.open("rb") as f:
            text = f.read(4096).decode("ascii").strip()
    except FileNotFoundError:
        raise Refused(f"--secret-file {path}: no such file; copy the core's $FAIRPOD_HOME/{SECRET_FILE} here "
                      "(mode 0600)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise Refused(f"--secret-file {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    if st.st_mode & 0o077:
        raise Refused(f"--secret-file {path} is readable by other users (mode {stat.S_IMODE(st.st_mode):o}): "
                      f"chmod 600 {path}")
    try:
        value = bytes.fromhex(text)
    except ValueError:
        value = b""
    if len(value) < 16:
        raise Refused(f"--secret-file {path} is not a fairpod job secret (a copy of the core's {SECRET_FILE})")
    return value


def core_traits(store: Store) -> Traits:
    """The core's executor as it wrote it at its last start; Refused before any core has run on the database."""
    from fairpod.server.runtime.wiring import TRAITS_META

    try:
        if store.get_spec() is None:
            raise Refused("the database holds no cluster yet: start the core first (fairpod up --db …)")
        raw = store.get_meta(TRAITS_META)
    except StoreError as e:
        raise Refused(f"cannot read the database: {e}") from None
    except Exception as e:  # noqa: BLE001 - the driver's own errors (unreachable, no such table): one line
        first = (str(getattr(e, "orig", None) or e).strip().splitlines() or [type(e).__name__])[0]
        raise Refused(f"cannot read the cluster from the database {store!r}: {first}") from None
    if raw is None:
        raise Refused("no core has started on this database with this fairpod version yet: start it first "
                      "(fairpod up --db …)")
    return Traits(**json.loads(raw))


def gc_thresholds() -> tuple[int, int, int]:
    """The cycle collector's thresholds this process will run with (``FAIRPOD_GC_THRESHOLDS`` or the server's:
    ``server/runtime/heap.py``); Refused when the variable is malformed."""
    try:
        return heap.thresholds(os.environ.get("FAIRPOD_GC_THRESHOLDS"))
    except SystemExit as e:
        raise Refused(str(e).removeprefix("fairpod: error: ")) from None


def serve_api(home: Path, url: str, core: str, address: str, port: int, secret_file: Path) -> None:
    """Serve until SIGTERM/SIGINT; Refused (one line) when it cannot start."""
    import uvicorn

    from fairpod.server.runtime.daemon import _listen
    from fairpod.server.runtime.wiring import build_worker

    key = secret(secret_file)
    store = Store(url)
    try:
        traits = core_traits(store)
    finally:
        store.close()
    socks = _listen([address], port)
    heap.watch()  # as the core and its API workers (the CLI checked FAIRPOD_GC_THRESHOLDS: gc_thresholds)
    app = build_worker(home, url, traits, core, key)
    log.info(heap.app_built())
    log.info("fairpod api on %s:%d: submits, list-jobs and get-job from %r; the rest to the core at %s",
             address, port, store, core)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=socks)


__all__ = ["Refused", "core_traits", "core_url", "database", "gc_thresholds", "secret", "serve_api"]
