"""A database that cannot be reached (PostgreSQL stopped or cut off): said once, seen by health, left behind once
it answers again.

When a store call fails and a ping of the database (:meth:`fairpod.store.Store.ping`) fails too, :func:`failed`
records the store as lost and logs one line with the retry schedule; while it is lost every other failure is
counted, not logged (before: a traceback per turn, per keeper and per request, 87,769 lines in a 32 s outage).
The reconcile loop runs no turn meanwhile (nothing is taken or acknowledged, so no replica's exit is lost) and
pings the database at :data:`SCHEDULE` (:func:`recheck`); once it answers, the memory is built again from the
store and one line says the store is back. Requests that need the store answer 503 "store unreachable" with
``Retry-After`` (:func:`add_handlers`), ``/healthz`` answers 503 with ``"store_unreachable"`` (:func:`health`),
and ``fairpod_store_unreachable`` is 1 (:func:`metrics`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

log = logging.getLogger("fairpod.store")

SCHEDULE = (0.5, 1.0, 2.0, 4.0)  # seconds between pings while the store is lost; then every EVERY seconds
EVERY = 5.0


@dataclass
class _State:
    since: float | None = None  # wall clock: lost since then (None: reachable)
    reason: str = ""
    errors: int = 0  # failures while lost
    tries: int = 0  # pings that failed since it was lost
    next_try: float = 0.0  # monotonic


_STATES: WeakKeyDictionary[Any, _State] = WeakKeyDictionary()
_LOCK = threading.Lock()


def _state(cp: Any) -> _State:
    with _LOCK:
        return _STATES.setdefault(cp, _State())


def _delay(tries: int) -> float:
    return SCHEDULE[tries] if tries < len(SCHEDULE) else EVERY


def schedule_text() -> str:
    return f"retrying after {', '.join(f'{s:g}' for s in SCHEDULE)} s, then every {EVERY:g} s"


def lost(cp: Any) -> bool:
    return _state(cp).since is not None


def _ping(cp: Any) -> str | None:
    """Why the database cannot be reached now, or None when it answers."""
    try:
        cp.queries.ping()
    except Exception as e:  # noqa: BLE001 - whatever the driver raises is the reason
        return _short(e)
    return None


def failed(cp: Any, e: BaseException) -> bool:
    """After a failure ``e`` (of a turn, a keeper, a request): True when the store is unreachable (then the
    failure needs no log line of its own: the loss was said once), False for any other failure."""
    st = _state(cp)
    if st.since is not None:
        st.errors += 1
        return True
    why = _ping(cp)
    if why is None:
        return False
    with _LOCK:
        if st.since is not None:  # another thread found it first and said so
            st.errors += 1
            return True
        st.since, st.reason, st.errors, st.tries = time.time(), why, 1, 0
        st.next_try = time.monotonic() + _delay(0)
    log.error("store unreachable: %s; turns paused, requests answered 503, /healthz 503; %s", why, schedule_text())
    return True


def recheck(cp: Any, rebuild: Callable[[], None]) -> bool:
    """While the store is lost: at the schedule's time, ping it; once it answers, ``rebuild`` (the memory from the
    store) and say it is back. True when the store is reachable (a turn may run)."""
    st = _state(cp)
    if st.since is None:
        return True
    if time.monotonic() < st.next_try:
        return False
    why = _ping(cp)
    if why is None:
        try:
            rebuild()
        except Exception as e:  # noqa: BLE001 - lost again at once: the next try says nothing new
            why = _short(e)
    if why is not None:
        st.tries += 1
        st.next_try = time.monotonic() + _delay(st.tries)
        return False
    log.warning("store is back after %.0f s (%d failed tries, %d failures while lost): turns resume",
                time.time() - st.since, st.tries, st.errors)
    with _LOCK:
        st.since, st.reason, st.errors, st.tries = None, "", 0, 0
    return True


def health(cp: Any) -> dict[str, Any] | None:
    """What ``/healthz`` adds while the store is lost (it then answers 503); None otherwise."""
    st = _state(cp)
    if st.since is None:
        return None
    return {"ok": False, "store_unreachable": True, "since": st.since, "detail": st.reason,
            "retry_in": round(max(0.0, st.next_try - time.monotonic()), 1)}


def problem_of(cp: Any) -> str:
    return f"the database cannot be reached ({_state(cp).reason}); {schedule_text()}"


def metrics(cp: Any) -> Iterator[Any]:
    from prometheus_client.core import GaugeMetricFamily

    g = GaugeMetricFamily("fairpod_store_unreachable", "1 while the control plane's database cannot be reached")
    g.add_metric([], 1.0 if lost(cp) else 0.0)
    yield g


def _short(e: BaseException) -> str:
    text = str(getattr(e, "orig", None) or e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__
