"""A full disk under ``FAIRPOD_HOME``: said, survived, and left behind once space returns.

When a write of the control plane fails for lack of space (SQLite's "database or disk is full", ``ENOSPC``,
``EDQUOT``), :func:`failed` records it: the API answers writes with 503 "disk full" and the reason
(:func:`add_handlers`), ``/healthz`` answers 503 with ``"disk_full"`` (:func:`health`), the metric
``fairpod_disk_full`` is 1 and ``fairpod_disk_full_errors_total`` counts the failures (:func:`metrics`). The
reconcile loop keeps turning; a failed turn committed nothing (exits are acknowledged only after the commit, so
they come again), and every turn while the disk is full first checks whether space is back by writing a probe
file of :data:`PROBE_BYTES` in the home (:func:`recheck`). Supervisors that cannot write a replica's exit keep it
and retry (:mod:`fairpod.executors.patient`), so no exit is lost, not even across a restart.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from fairpod.server.keepers import outage

log = logging.getLogger("fairpod.diskfull")

PROBE_BYTES = 256 * 1024  # space a probe must find before the disk counts as writable again
RECHECK_EVERY = 1.0  # seconds between probes while the disk is full
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


@dataclass
class _State:
    since: float | None = None  # wall clock: the disk is full since then (None: not full)
    reason: str = ""
    errors: int = 0
    probed_at: float = 0.0  # monotonic


_STATES: WeakKeyDictionary[Any, _State] = WeakKeyDictionary()
_LOCK = threading.Lock()


def _state(cp: Any) -> _State:
    with _LOCK:
        return _STATES.setdefault(cp, _State())


def is_disk_full(e: BaseException | None) -> bool:
    """Whether ``e`` (or what caused it, or the driver error it wraps) is a failure for lack of space."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _FULL_ERRNOS:
            return True
        if isinstance(e, sqlite3.Error) and ("disk is full" in str(e) or getattr(e, "sqlite_errorcode", None) == 13):
            return True
        orig = getattr(e, "orig", None)  # SQLAlchemy's wrapper of the driver's error
        e = orig if isinstance(orig, BaseException) else (e.__cause__ or e.__context__)
    return False


def failed(cp: Any, e: BaseException) -> bool:
    """Record a failure; True when it was the disk being full (then it is logged once per episode)."""
    if not is_disk_full(e):
        return False
    st = _state(cp)
    st.errors += 1
    if st.since is None:
        st.since = time.time()
        st.reason = f"no space left under {getattr(cp, 'home', 'FAIRPOD_HOME')}: {_short(e)}"
        st.probed_at = time.monotonic()
        log.error("disk full: %s; writes are refused (503) and retried until space is back", st.reason)
    return True


def recheck(cp: Any) -> None:
    """While the disk is full: at most every :data:`RECHECK_EVERY` s, write a probe file in the home; once it
    fits, the disk is no longer full."""
    st = _state(cp)
    if st.since is None or time.monotonic() - st.probed_at < RECHECK_EVERY:
        return
    st.probed_at = time.monotonic()
    home = Path(getattr(cp, "home", "."))
    try:
        fd, name = tempfile.mkstemp(prefix=".space-probe-", dir=home)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(name)
    except OSError as e:
        if e.errno in _FULL_ERRNOS:
            return
        log.warning("space probe in %s failed: %s", home, e)
        return
    log.warning("disk space is back after %.0f s: writes are accepted again", time.time() - st.since)
    st.since = None
    st.reason = ""


def full(cp: Any) -> str | None:
    """Why the disk is full, or None."""
    st = _state(cp)
    return st.reason if st.since is not None else None


def health(cp: Any) -> dict[str, Any] | None:
    """What ``/healthz`` adds while the disk is full (it then answers 503); None otherwise."""
    st = _state(cp)
    if st.since is None:
        return None
    return {"ok": False, "disk_full": True, "since": st.since, "detail": st.reason}


def metrics(cp: Any) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    st = _state(cp)
    g = GaugeMetricFamily("fairpod_disk_full", "1 while writes under FAIRPOD_HOME fail for lack of space")
    g.add_metric([], 1.0 if st.since is not None else 0.0)
    yield g
    c = CounterMetricFamily("fairpod_disk_full_errors", "Writes that failed for lack of space")
    c.add_metric([], float(st.errors))
    yield c


def add_handlers(app: Any, cp: Any, problem: Any) -> None:
    """503 "disk full" for a request whose write failed for lack of space, 503 "store unreachable" for one that
    failed because the database cannot be reached (fairpod.server.keepers.outage); any other such error stays a 500."""
    from sqlalchemy.exc import DBAPIError, OperationalError
    from starlette.requests import Request
    from starlette.responses import Response

    async def _handler(_: Request, e: Exception) -> Response:
        if failed(cp, e):
            resp: Response = problem(503, "disk full", f"{full(cp)}; free space there and retry")
            resp.headers["Retry-After"] = "10"
            return resp
        if outage.failed(cp, e):  # the database is out: said once in the log (fairpod.server.keepers.outage)
            resp = problem(503, "store unreachable", outage.problem_of(cp))
            resp.headers["Retry-After"] = "5"
            return resp
        log.error("request failed", exc_info=e)
        return problem(500, "internal server error", "the server failed; see its log") # type: ignore[no-any-return]

    for kind in (OperationalError, DBAPIError, sqlite3.OperationalError, OSError):
        app.add_exception_handler(kind, _handler)


def _short(e: BaseException) -> str:
    text = str(getattr(e, "orig", None) or e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__
