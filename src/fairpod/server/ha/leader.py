"""Leader election for standby control planes (``fairpod up --ha`` on one PostgreSQL database).

:class:`Elector` runs one thread that takes a step of :func:`fairpod.store.lease.acquire` every ``renew``
seconds while it leads and every ``poll`` seconds while it stands by. Its lease lasts ``lease`` seconds in the
database's clock; locally it counts as held until ``lease - margin`` seconds after the start of the last
renewal that succeeded (monotonic clock, which also runs while the process is stopped), so it ends here
before the database lets a standby take it.

Fencing, the two places where a leader acts:

- the store: :meth:`Elector.check_tx` runs at the start of every write transaction (``Store.fence``) and
  refuses it unless the lease is held here and the database still names this node with this epoch
  (:func:`fairpod.store.lease.check_fence`);
- the executor: :class:`FencedExecutor` refuses to launch, stop, resize or acknowledge exits unless the lease
  is held here (monotonic clock).

A refused write or action, a lease that was not renewed in time, or a renewal that finds a newer epoch makes
the control plane step down: it says so in its log and ``on_step_down`` runs (``fairpod up`` starts again as a
standby, by exec, so nothing of the old memory survives).

Fault injection, for tests only: ``FAIRPOD_TEST_FAULT_NO_FENCE=1`` (:data:`NO_FENCE_ENV`, read here and nowhere
else, never set by fairpod) switches the fence off, so that the chaos test can show that it fails without it:
the leader then trusts its last renewal (no local lease clock) and its writes and actions are not checked; it
still steps down when a renewal finds a newer epoch. Unset (the default), nothing of this changes a code path.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from fairpod.executors.base import ExecutorError
from fairpod.store import Store, lease
from fairpod.store.lease import Fenced, Lease

log = logging.getLogger("fairpod.leader")

LEASE_SECONDS = 6.0
RENEW_SECONDS = 1.5
POLL_SECONDS = 1.0
MARGIN_SECONDS = 0.5
MIN_LEASE_SECONDS = 2.0  # the leader's local margin and a renewal or two must fit in it
NO_FENCE_ENV = "FAIRPOD_TEST_FAULT_NO_FENCE"  # fault injection for tests: "1" switches the fence off (module doc)


@dataclass(frozen=True)
class HaSettings:
    """The election's timings (``fairpod up --ha --lease-seconds``); a leader that dies is replaced within
    about ``lease + poll`` seconds plus the new leader's recovery."""

    lease: float = LEASE_SECONDS
    renew: float = RENEW_SECONDS
    poll: float = POLL_SECONDS

    @classmethod
    def of(cls, lease: float | None) -> HaSettings:
        """The timings for a lease of ``lease`` seconds: renewed every quarter of it, tried every second."""
        if lease is None:
            return cls()
        return cls(lease, lease / 4, min(POLL_SECONDS, lease / 4))

    def check(self) -> None:
        if not self.lease >= MIN_LEASE_SECONDS:
            raise ValueError(f"--lease-seconds {self.lease:g} is too short: at least {MIN_LEASE_SECONDS:g}")
        if not (0 < self.renew <= self.lease / 2 and self.poll > 0):
            raise ValueError(f"--lease-seconds {self.lease:g} must be at least twice the renewal interval "
                             f"({self.renew:g} s)")


def end_idle_transactions(engine: Engine, seconds: float) -> None:
    """Have the database end a session of ``engine`` that stays idle inside a transaction for ``seconds`` (a
    process stopped there would keep its row locks, the lease row's among them, for as long as it is stopped)."""
    ms = int(seconds * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        with dbapi_conn.cursor() as cur:
            cur.execute(f"SET idle_in_transaction_session_timeout = {ms}")
        dbapi_conn.commit()


@dataclass
class Counters:
    """What /metrics shows of the election."""

    leader_changes: int = 0  # epochs seen to change (this node's view)
    renewals_late: int = 0  # renewals that ended later than the renewal interval after the previous one
    renewals_failed: int = 0
    fenced: int = 0  # writes and executor actions refused
    takeovers: list[float] = field(default_factory=list)  # seconds from winning to serving (this node)


class Elector:
    def __init__(self, url: str, node: str, my_url: str, settings: HaSettings | None = None) -> None:
        self.node, self.my_url = node, my_url
        self.settings = settings or HaSettings()
        # its own small pool, so that a leader's busy store never delays a renewal
        self.engine: Engine = create_engine(url, pool_size=2, max_overflow=2, pool_pre_ping=True,
                                            pool_timeout=self.settings.lease, connect_args={"connect_timeout": 3})
        # a node stopped inside its renewal (between the row's FOR UPDATE and the commit) holds the lease row:
        # its session is ended after a lease, as the store's are (guard), so that a standby can take over
        end_idle_transactions(self.engine, self.settings.lease)
        self.epoch: int | None = None
        self.valid_until = 0.0  # monotonic
        self.last: Lease | None = None
        self.started_at = time.time()
        self.led_since: float | None = None
        self.counters = Counters()
        self.on_lead: Callable[[int], None] = lambda epoch: None
        self.on_step_down: Callable[[str], None] = lambda why: None
        self.on_late: Callable[[float], None] = lambda gap: None  # a renewal came late (seconds since the last)
        self.previous: Lease | None = None  # the lease before the last change of leader this node saw
        self._down = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_renewal = 0.0
        self._fenced_told = 0  # refusals already added to this node's row of ha_members
        self.unfenced = os.environ.get(NO_FENCE_ENV) == "1"  # a test's fault injection (module doc)
        if self.unfenced:
            log.error("%s=1: the fence is OFF (fault injection for tests; never run a cluster like this)",
                      NO_FENCE_ENV)

    # -- the loop -----------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fairpod-elector", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.lease)
        if release and self.epoch is not None and self.holds():
            try:
                with self.engine.begin() as conn:
                    lease.release(conn, self.node, self.epoch)
                log.info("released the lease (epoch %d): a standby takes over at its next try", self.epoch)
            except SQLAlchemyError as e:
                log.warning("could not release the lease: %s", e)
        self.engine.dispose()

    def _run(self) -> None:
        while not self._stop.is_set() and not self._down.is_set():
            self.step()
            wait = self.settings.renew if self.epoch is not None else self.settings.poll
            self._stop.wait(wait)

    def step(self) -> None:
        """One election step: renew or try to take the lease, then record the heartbeat."""
        if self.epoch is not None and not self.holds():
            self.step_down(f"the lease was not renewed for {self.settings.lease:g} s")
            return
        t0 = time.monotonic()
        try:
            with self.engine.begin() as conn:
                got = lease.acquire(conn, self.node, self.my_url, self.epoch, self.settings.lease)
        except SQLAlchemyError as e:
            self.counters.renewals_failed += 1
            log.warning("lease %s failed: %s", "renewal" if self.epoch is not None else "try",
                        str(e).splitlines()[0])
            return
        if self.last is not None and got.epoch != self.last.epoch:
            self.counters.leader_changes += 1
            self.previous = self.last
        self.last = got
        mine = got.holder == self.node
        if self.epoch is not None:
            if not mine or got.epoch != self.epoch:
                self.step_down(f"{got.holder} holds the lease at epoch {got.epoch}")
                return
            if self._last_renewal and t0 - self._last_renewal > self.settings.renew * 2:
                self.counters.renewals_late += 1
                log.warning("lease renewed late: %.1f s after the previous renewal", t0 - self._last_renewal)
                self.on_late(t0 - self._last_renewal)
            self.valid_until = t0 + self.settings.lease - MARGIN_SECONDS
            self._last_renewal = t0
        elif mine:
            self.epoch = got.epoch
            self.valid_until = t0 + self.settings.lease - MARGIN_SECONDS
            self._last_renewal = t0
            self.led_since = time.time()
            log.warning("this control plane (%s) leads now, epoch %d", self.node, got.epoch)
            self.on_lead(got.epoch)
        self.heartbeat()

    def heartbeat(self) -> None:
        try:
            fenced = self.counters.fenced
            with self.engine.begin() as conn:
                lease.heartbeat(conn, self.node, self.my_url, os.getpid(), self.role, self.started_at,
                                fenced - self._fenced_told)
            self._fenced_told = fenced
        except SQLAlchemyError as e:
            log.warning("heartbeat failed: %s", str(e).splitlines()[0])

    # -- being the leader ---------------------------------------------------------------------------
    @property
    def role(self) -> str:
        return "leader" if self.epoch is not None and not self._down.is_set() else "standby"

    def holds(self) -> bool:
        """True while this node leads and its lease holds by the local clock."""
        return (self.epoch is not None and not self._down.is_set()
                and (self.unfenced or time.monotonic() < self.valid_until))

    def step_down(self, why: str) -> None:
        if self._down.is_set():
            return
        self._down.set()
        log.error("stepping down: %s (this control plane led at epoch %s)", why, self.epoch)
        self.heartbeat()
        self.on_step_down(why)

    def refuse(self, what: str, why: str) -> None:
        self.counters.fenced += 1
        log.error("fenced: %s refused: %s", what, why)
        if self.epoch is None:  # never led: nothing to step down from
            return
        threading.Thread(target=self.step_down, args=(why,), name="fairpod-step-down", daemon=True).start()

    def guard(self, store: Store) -> None:
        """Fence ``store``'s writes by the lease, and have the database end a transaction of this process that
        stays idle for a lease (a process stopped inside one would hold the lease row and keep a standby from
        taking over)."""
        store.fence = self.check_tx
        end_idle_transactions(store.engine, self.settings.lease)

    def check_tx(self, session: Session) -> None:
        """``Store.fence``: a write transaction goes on only while this node holds the lease."""
        if self.unfenced:
            return
        if not self.holds() or self.epoch is None:
            why = f"lease not held (epoch {self.epoch})"
            self.refuse("a store write", why)
            raise Fenced(f"write refused: {why}")
        try:
            lease.check_fence(session, self.node, self.epoch)
        except Fenced as e:
            self.refuse("a store write", str(e))
            raise

    def check_action(self, what: str) -> None:
        if not self.holds():
            why = f"lease not held (epoch {self.epoch})"
            self.refuse(what, why)
            raise ExecutorError(f"{what} refused: this control plane no longer leads")

    def status(self) -> dict[str, Any]:
        """Who leads, since when, and the standbys, from the database (for /api/v1/ha and ``fairpod status``)."""
        with self.engine.connect() as conn:
            cur = lease.current(conn)
            members, now = lease.members(conn)
        leader = None
        if cur is not None:
            leader = {"node": cur.holder, "url": cur.url, "epoch": cur.epoch, "since": cur.since,
                      "expires_in": round(cur.expires_at - cur.now, 3), "expired": cur.expired}
        live = [m for m in members if now - m.seen_at <= self.settings.lease]
        return {"node": self.node, "role": self.role, "leader": leader,
                "lease_seconds": self.settings.lease,
                "standbys": [{"node": m.node, "url": m.url, "pid": m.pid, "seen_ago": round(now - m.seen_at, 3)}
                             for m in live if m.role == "standby" and (cur is None or m.node != cur.holder)],
                "fenced_total": {m.node: m.fenced for m in members if m.fenced}}

    def metrics(self) -> str:
        c = self.counters
        lines = [
            "# HELP fairpod_leader 1 when this control plane leads", "# TYPE fairpod_leader gauge",
            f"fairpod_leader {1 if self.holds() else 0}",
            "# HELP fairpod_leader_epoch the lease's epoch as this control plane last read it",
            "# TYPE fairpod_leader_epoch gauge", f"fairpod_leader_epoch {self.last.epoch if self.last else 0}",
            "# HELP fairpod_leader_changes_total changes of leader this control plane saw",
            "# TYPE fairpod_leader_changes_total counter", f"fairpod_leader_changes_total {c.leader_changes}",
            "# HELP fairpod_lease_renewals_late_total renewals more than twice the interval after the previous",
            "# TYPE fairpod_lease_renewals_late_total counter", f"fairpod_lease_renewals_late_total {c.renewals_late}",
            "# HELP fairpod_lease_renewals_failed_total lease steps the database did not answer",
            "# TYPE fairpod_lease_renewals_failed_total counter",
            f"fairpod_lease_renewals_failed_total {c.renewals_failed}",
            "# HELP fairpod_fenced_writes_total store writes and executor actions refused by the fence",
            "# TYPE fairpod_fenced_writes_total counter", f"fairpod_fenced_writes_total {c.fenced}",
        ]
        return "\n".join(lines) + "\n"


# every executor action that starts, stops or forgets a process (restart_replicas: a restart in place)
FENCED_ACTIONS = frozenset({"launch", "stop", "add_replicas", "stop_replicas", "restart_replicas", "ack", "discard"})


class FencedExecutor:
    """An executor whose actions (launch, stop, resize, restarts in place, acknowledging exits) go through only while ``elector``
    holds the lease; everything else passes through. Capabilities are the wrapped executor's. An executor that
    also acts on its own (the Ray executor's background thread kills lost agents and overdue replicas, starts
    agents, cleans up) gets the same check through its ``set_fence``."""

    def __init__(self, inner: Any, elector: Elector) -> None:
        self._inner = inner
        self._elector = elector
        set_fence = getattr(inner, "set_fence", None)
        if set_fence is not None:
            set_fence(elector.check_action)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name not in FENCED_ACTIONS:
            if name == "poll":
                return self._poll
            return value

        def fenced(*a: Any, **kw: Any) -> Any:
            self._elector.check_action(name)
            return value(*a, **kw)

        return fenced

    def _poll(self, *, ack: bool = True) -> Any:
        if ack:
            self._elector.check_action("ack")
        return self._inner.poll(ack=ack)
