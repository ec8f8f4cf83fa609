"""The start of ``fairpod up``: the checks before anything is written (:func:`check_state`), and what it says when
a read or write of its start fails (a full disk after a kill -9, a database that
refuses a write): one line, never a traceback (:func:`start_failure`), and a first start's empty database file
removed again (:func:`forget_new_database`), so that the next ``fairpod up`` does not refuse it as "not a fairpod
database". Before, ``fairpod up --spec`` on a full disk printed SQLAlchemy's traceback of the failed commit, and
a first start on a full disk left a 0-byte ``fairpod.db`` behind.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from fairpod.server.keepers.diskfull import is_disk_full
from fairpod.store import StoreError

START_ERRORS = (StoreError, SQLAlchemyError, OSError)  # what a read or write of the start may raise


def check_state(home: Path, url: str) -> None:
    """Before anything is written: the home must be writable and a database already there a healthy fairpod one
    (``fairpod.store.checks``; StoreError in one line). Then the temporary files of a killed backup go."""
    from fairpod.store.backup import sqlite_path
    from fairpod.store.checks import check_database, check_writable, clean_leftovers

    check_writable(home)
    db = sqlite_path(url)
    if db is not None:
        check_database(db)
    for p in clean_leftovers(home):
        logging.getLogger("fairpod").info("removed %s, left by a backup or restore that was killed", p)


def start_failure(home: Path, e: BaseException) -> str:
    """The one line ``fairpod up`` says when a read or write of its start fails (never a traceback): a full disk
    as such, with what to free, else the store's own message or the first line of the driver's."""
    text = str(getattr(e, "orig", None) or e).strip().splitlines()
    why = text[0][:300] if text else type(e).__name__
    if is_disk_full(e) or "disk is full" in why or "No space left" in why:
        return (f"fairpod: error: no space left under {home} ({why}): free space there (old run logs under runs/, "
                "server.log, fairpod.db.before-restore-*) and run fairpod up again")
    if isinstance(e, StoreError):
        return f"fairpod: error: {why}"
    if isinstance(e, OSError):
        return f"fairpod: error: cannot use FAIRPOD_HOME {home}: {e.strerror or why}"
    return f"fairpod: error: the database cannot be used: {why}"


def new_database(url: str) -> Path | None:
    """The SQLite file ``url`` names when it does not exist yet (a first start), else None."""
    from fairpod.store.backup import sqlite_path

    db = sqlite_path(url)
    return Path(db) if db is not None and not Path(db).exists() else None


def forget_new_database(db: Path | None) -> None:
    """After a first start that failed (a full disk): the database file it began, when nothing is in it, so the
    next ``fairpod up`` does not refuse an empty file as "not a fairpod database"."""
    if db is None:
        return
    with contextlib.suppress(OSError):
        if db.stat().st_size == 0:
            for sfx in ("-wal", "-shm", ""):
                Path(f"{db}{sfx}").unlink(missing_ok=True)


def child_failure(home: Path, ended: bool) -> str:
    """What ``fairpod up`` says when the server it started in the background did not come up: the one line the
    server said before it ended (:func:`start_failure`, printed by ``serve``), else the end of ``server.log``."""
    tail = (home / "server.log").read_text(errors="replace")[-2000:]
    said = [x for x in tail.splitlines() if x.startswith("fairpod: error: ")]
    if said and ended:
        return said[-1]
    return f"fairpod: error: the server did not come up; last lines of {home / 'server.log'}:\n{tail}"


START_LIMIT = 600.0  # the most seconds ``fairpod up`` waits for the server it started in the background
STILL_STARTING = 15.0  # after this many seconds of waiting it says so, once


def wait_started(port: int, proc: subprocess.Popen, home: Path, limit: float) -> bool:
    """True once /healthz on ``port`` answers from ``proc``; False when ``proc`` ends first, or after ``limit``
    seconds (:func:`start_limit`). The wait is for the event, not for a fixed time: a start that connects to a Ray
    cluster starts an agent on each node, which takes as long as the machine is busy (under load, longer than the
    30 s ``up`` waited before; it then stopped a server that was coming up, and left that server's agents holding
    the nodes' GPUs). A wait longer than :data:`STILL_STARTING` is said once, on stderr."""
    import httpx

    start = time.monotonic()
    noted = False
    while (waited := time.monotonic() - start) < limit:
        if proc.poll() is not None:
            return False
        try:
            r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1.0)
            if r.status_code == 200 and r.json().get("pid") == proc.pid:
                return True
        except (httpx.HTTPError, ValueError):  # (ValueError: not JSON, not a fairpod server)
            pass
        if not noted and waited >= STILL_STARTING:
            noted = True
            print(f"fairpod: the server (pid {proc.pid}) is still starting; waiting for it up to {limit:g} s "
                  f"(its log: {home / 'server.log'})", file=sys.stderr, flush=True)
        time.sleep(0.1)
    return False


def start_limit(value: str | None) -> float:
    """``FAIRPOD_START_LIMIT``: seconds > 0 (ValueError naming it otherwise); unset or empty: :data:`START_LIMIT`."""
    if value is None or not value.strip():
        return START_LIMIT
    try:
        limit = float(value)
    except ValueError:
        limit = float("nan")
    if not 0 < limit < float("inf"):
        raise ValueError(f"FAIRPOD_START_LIMIT={value!r}: give a number of seconds > 0")
    return limit


LOOPBACK = "127.0.0.1"


def check_advertise_address(address: str | None) -> str:
    """The address replicas reach the control plane at: ``address`` (an IP address of this machine; ValueError
    with one line otherwise) or 127.0.0.1."""
    if address is None:
        return LOOPBACK
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        raise ValueError(f"invalid --advertise-address {address!r}: give an IP address of this machine") from None
    if ip.is_unspecified or ip.is_multicast:
        raise ValueError(f"invalid --advertise-address {address}: replicas need an address they can connect to")
    try:
        with socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET) as s:
            s.bind((str(ip), 0))
    except OSError as e:
        raise ValueError(f"--advertise-address {address} is not an address of this machine "
                         f"({e.strerror or e})") from None
    return str(ip)
