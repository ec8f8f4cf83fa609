"""The part of :class:`fairpod.server.core.ControlPlane` that only the door (:class:`fairpod.server.core.api.Core`)
needs: reads of the core's memory handed out as the results of functions, never the memory itself, and the writes
of records that are no job's or node's state (audit entries, users and tokens, usage samples and their rollups,
the store's meta table, retention). Those take no lock, as before they were commands: each is one transaction of
the store's own, and the routes that ask for them never wait for a turn."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload
from fairpod.server.accounting.rollups import roll_up
from fairpod.server.core.api import Busy
from fairpod.server.core.batch import BatchingStore
from fairpod.server.core.facts import Facts, LiveFacts
from fairpod.server.core.published import AsOf, Published
from fairpod.server.core.queries import Queries
from fairpod.server.core.transitions import array_holds
from fairpod.server.core.transitions.budgets import BudgetKeeper
from fairpod.server.keepers import outage
from fairpod.server.runs import Run
from fairpod.store.records import User
from fairpod.store.usage import UsageSample

T = TypeVar("T")

FIRST_WAIT = 30.0  # seconds a read of the engine with no published answer yet waits for the lock (the turn), at most


class Door:
    """Reads and record writes for the modules outside the core (the lock and the memory are the plane's)."""

    queries: Queries
    lock: threading.RLock
    store: BatchingStore
    snap: Snapshot
    runs: dict[int, Run]
    budgets: BudgetKeeper
    published: Published
    facts: Facts
    facts_seconds: float
    cycles: int
    clock: Callable[[], float]

    def engine_read(self, fn: Callable[[Snapshot], T], *, lock: bool = False, wait: float | None = None) -> T:
        if wait is not None:
            if not self.lock.acquire(timeout=wait):
                raise Busy(f"the control plane's lock was not free within {wait:g} s")
            try:
                return fn(self.snap)
            finally:
                self.lock.release()
        if lock:
            with self.lock:
                return fn(self.snap)
        return fn(self.snap)

    def engine_view(self, key: Hashable, fn: Callable[[Snapshot], T]) -> tuple[T, AsOf] | None:
        # the lock only when it is free: while a turn or a command holds it, the published answer; a key with
        # none yet (its first read) waits for the lock, as every read did before answers were published: an
        # answer of another key, or a 503 for a first scrape or explain, would be wrong or a failure to the
        # user; None only when the core was held FIRST_WAIT (a stuck core)
        if not self.lock.acquire(blocking=False):
            got = self.published.get(key, fn)
            if got is not None:
                return got
            if not self.lock.acquire(timeout=FIRST_WAIT):
                return None
        try:
            as_of = AsOf(self.cycles, self.clock())
            value = fn(self.snap)
        finally:
            self.lock.release()
        self.published.put(key, fn, value, as_of)
        return value, as_of

    def engine_facts(self, fn: Callable[[Facts], T]) -> tuple[T, AsOf]:
        # the lock only when it is free (the live snapshot: the last turn and the commands since); while a turn or
        # a command holds it, what the last turn published after its commit: never a turn half done
        if self.lock.acquire(blocking=False):
            try:
                meter = self.budgets.meter
                live = LiveFacts(self.snap, AsOf(self.cycles, self.clock()), None if meter is None else meter.used,
                                 self.facts)
                return fn(live), live.as_of
            finally:
                self.lock.release()
        facts = self.facts
        return fn(facts), facts.as_of

    def publish_facts(self) -> None:
        """The end of a turn (and of a rebuild), after its commit, under the lock: the facts reads take while the
        next turn runs (:mod:`fairpod.server.core.facts`)."""
        t0 = time.thread_time()
        meter = self.budgets.meter
        self.facts = Facts.publish(self.snap, AsOf(self.cycles, self.clock()), getattr(self, "facts", None),
                                   None if meter is None else dict(meter.used))
        self.facts_seconds = time.thread_time() - t0  # CPU: what it costs the turn, whatever the machine's load

    def attempt_state(self, job_id: int) -> dict[str, Any] | None:
        run = self.runs.get(job_id)
        return run.to_json() if run is not None else None

    def live_attempts(self) -> dict[int, int]:
        return {jid: run.attempt for jid, run in list(self.runs.items())
                if run.launched and run.stopping is None}

    def throttled_arrays(self) -> list[tuple[int, list[tuple[int, Workload, bool]]]]:
        return array_holds.throttled(self)  # type: ignore[arg-type]  # (the plane is a CoreState)

    def budget_rows(self, teams: list[str] | None = None) -> list[dict[str, Any]]:
        return self.budgets.rows(self, teams)  # type: ignore[arg-type]  # (the plane is a CoreState)

    def database_lost(self, e: BaseException) -> bool:
        """True when ``e`` came of a database that cannot be reached: said once (fairpod.server.keepers.outage)."""
        return outage.failed(self, e)

    # -- records that are no job's or node's state ----------------------------------------------------------
    def node_event(self, node: str, kind: str, msg: str, data: dict[str, Any]) -> None:
        self.store.append_event(kind, msg, node=node, data=data)

    def audit(self, actor: str, action: str, target: str, detail: dict[str, Any]) -> None:
        self.store.append_audit(actor, action, target, detail)

    def create_user(self, name: str, role: Any, teams: list[str], actor: str) -> tuple[User, str]:
        """A new user and its first token, with the audit entry, in one transaction."""
        with self.store.tx() as t:
            u = t.create_user(name, role, teams)
            token = t.issue_token(u.name, "created with the user")
            t.append_audit(actor, "user.create", u.name, {"role": u.role.value, "teams": u.teams})
        return u, token

    def issue_token(self, user: str, description: str, actor: str, action: str) -> str:
        token = self.store.issue_token(user, description)
        self.store.append_audit(actor, action, user, {})
        return str(token)

    def revoke_user_tokens(self, user: str, actor: str) -> int:
        n = int(self.store.revoke_user_tokens(user))
        self.store.append_audit(actor, "user.revoke", user, {"tokens": n})
        return n

    def record_usage(self, now: float, samples: list[UsageSample]) -> None:
        self.store.append_usage(now, samples)

    def roll_up_usage(self, last_sample: float, samples: int) -> bool:
        """Sum written samples into buckets (:func:`fairpod.server.accounting.rollups.roll_up`); True while behind."""
        return roll_up(self.store.store, last_sample, samples=samples)

    def prune(self, before: float, limit: int) -> Any:
        return self.store.prune(before, limit=limit)

    def set_meta(self, key: str, value: str) -> None:
        self.store.set_meta(key, value)
