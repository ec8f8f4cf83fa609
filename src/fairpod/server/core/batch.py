"""Batched job writes for the reconcile loop: one transaction per phase of a cycle instead of two or three
per job.

``BatchingStore`` stands in for the control plane's ``Store`` and passes every call through, except on the
thread that has opened ``batch()``: there ``update_job`` and ``append_event`` are collected in memory (the
updated job is returned at once, as ``update_job`` would) and ``get_job`` sees the collected changes;
``flush()`` (also at the end of ``batch()``) writes them all in one transaction. Other threads keep reading
the committed state. The control plane flushes before it starts processes, so the store still knows about a
job before its replicas exist.

It also remembers successful token checks for ``TOKEN_CACHE_S`` seconds (every API request checks its token);
revoking tokens or changing users through it clears what it remembers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from fairpod.model.jobs import JobState
from fairpod.store import Store, db
from fairpod.store import fields as f
from fairpod.store.jobs import JOB_FIELDS
from fairpod.store.records import Event, Job, NotFound, User

# The Job record's python value of a field as update_job would return it (JSON fields get a copy).
_RECORD = {"state": JobState, "placement": list, "borrowed_from": dict}
log = logging.getLogger("fairpod.control")
TOKEN_CACHE_S = 2.0


class _Pending:
    __slots__ = ("events", "jobs", "changes", "after", "runs")

    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}  # the latest version of every job read or written in this batch
        self.changes: dict[int, dict[str, Any]] = {}  # job id -> fields to write
        self.runs: dict[int, Any] = {}  # job id -> its Run (fairpod.server.runs), written as run_state at the flush
        self.events: list[dict[str, Any]] = []
        self.after: list[Callable[[], None]] = []  # what carries out the collected intents, once committed


class BatchingStore:
    """A ``Store`` whose job updates and events are batched on the thread inside ``batch()``."""

    def __init__(self, store: Store) -> None:
        self._store = store
        # True for a failure that needs no log line (a lost database: fairpod.server.keepers.outage says it once)
        self.quiet: Callable[[BaseException], bool] = lambda e: False
        self._local = threading.local()
        self._tokens: dict[str, tuple[float, User]] = {}  # token -> (valid until, monotonic), its user
        self._tokens_lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @property
    def store(self) -> Store:
        return self._store

    def _pending(self) -> _Pending | None:
        return getattr(self._local, "pending", None)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Collect job updates and events of this thread until the block ends, then write them. Nested
        blocks join the outer one. If the block raises, what was collected is still written (as it would
        have been without the batch), and a failure of that write is logged, not raised over the first."""
        if self._pending() is not None:
            yield
            return
        self._local.pending = _Pending()
        try:
            yield
        except BaseException:
            try:
                self.flush()
            except Exception as e:
                if not self.quiet(e):
                    log.exception("could not write the batched job updates after an error")
            raise
        else:
            self.flush()
        finally:
            self._local.pending = None

    def flush(self) -> None:
        """Write what this thread's batch collected, in one transaction; the batch stays open. Then call what
        ``after_commit`` queued (nothing of it when the write failed: an intent not stored is not carried out)."""
        p = self._pending()
        if p is None:
            return
        for jid, run in p.runs.items():  # each run saved in this batch: serialized once, as it is now
            state = run.to_json()
            p.changes.setdefault(jid, {})["run_state"] = state
            if jid in p.jobs:
                p.jobs[jid] = replace(p.jobs[jid], run_state=state)
        changes, events, after = p.changes, p.events, p.after
        p.changes, p.events, p.after, p.runs = {}, [], [], {}
        if changes or events:
            with self._store.tx() as t:
                t.update_jobs(changes)
                t.append_events(events)
        for fn in after:
            try:
                fn()
            except Exception:  # one executor call that failed does not keep the others from being made
                log.exception("carrying out a committed change failed")

    def after_commit(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once what this thread wrote so far is committed: at the next ``flush`` inside ``batch()``,
        at once outside (where every write commits by itself). Signals to processes go through here, so that a
        crash between the two leaves a stored intent that start-up carries out, never a signal the store does
        not know of."""
        p = self._pending()
        if p is None:
            fn()
        else:
            p.after.append(fn)

    def prefetch(self, job_ids: Iterable[int | str | None]) -> None:
        """Read the jobs of these ids that the batch has not seen yet, in one query (outside a batch: no-op)."""
        p = self._pending()
        if p is None:
            return
        want = {int(i) for i in job_ids if i is not None} - p.jobs.keys()
        if want:
            p.jobs.update(self._store.get_jobs(want))

    # -- token checks: a short cache, cleared by every change to users or tokens made through here -------
    def verified_token(self, token: str) -> User | None:
        """What :meth:`verify_token` answers from memory alone (this cache, or the store's); None: ask it."""
        with self._tokens_lock:
            hit = self._tokens.get(token)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        return self._store.verified_token(token)

    def verify_token(self, token: str, **kw: Any) -> User | None:
        """``Store.verify_token``, remembered for ``TOKEN_CACHE_S`` seconds: a token revoked (or a user
        changed) through this object's methods takes effect at once; one changed otherwise (inside ``tx()``,
        or by another process) within that time."""
        now = time.monotonic()
        if not kw:
            with self._tokens_lock:
                hit = self._tokens.get(token)
            if hit is not None and hit[0] > now:
                return hit[1]
        user = self._store.verify_token(token, **kw)
        if user is not None and not kw:
            with self._tokens_lock:
                if len(self._tokens) > 10_000:
                    self._tokens.clear()
                self._tokens[token] = (now + TOKEN_CACHE_S, user)
        return user

    def _forget_tokens(self) -> None:
        with self._tokens_lock:
            self._tokens.clear()

    def revoke_token(self, *a: Any, **kw: Any) -> Any:
        self._forget_tokens()
        return self._store.revoke_token(*a, **kw)

    def revoke_user_tokens(self, *a: Any, **kw: Any) -> Any:
        self._forget_tokens()
        return self._store.revoke_user_tokens(*a, **kw)

    def update_user(self, *a: Any, **kw: Any) -> Any:
        self._forget_tokens()
        return self._store.update_user(*a, **kw)

    def delete_user(self, *a: Any, **kw: Any) -> Any:
        self._forget_tokens()
        return self._store.delete_user(*a, **kw)

    # -- the batched operations ----------------------------------------------------------------------
    def get_job(self, job_id: int) -> Job | None:
        p = self._pending()
        if p is None:
            return self._store.get_job(job_id)
        job = p.jobs.get(job_id)
        if job is None:
            job = self._store.get_job(job_id)
            if job is not None:
                p.jobs[job_id] = job
        return job

    def update_job(self, job_id: int, changes: Mapping[str, Any], **kw: Any) -> Job:
        p = self._pending()
        if p is None or kw or "spec" in changes:
            if p is not None:
                self.flush()
                p.jobs.pop(job_id, None)
            return self._store.update_job(job_id, changes, **kw)
        f.check("job", JOB_FIELDS, changes)  # bad values fail here, as they would in update_job
        if "run_state" in changes:
            p.runs.pop(job_id, None)  # written now: it replaces a run saved earlier in the batch
        job = self.get_job(job_id)
        if job is None:
            raise NotFound(f"job {job_id} does not exist")
        rec = {k: (_RECORD[k](v) if k in _RECORD and v is not None else v) for k, v in changes.items()}
        if "run_state" in rec and rec["run_state"] is not None:
            rec["run_state"] = f.json_of(dict)(rec["run_state"])
        job = replace(job, **rec, updated_at=db.now())
        p.jobs[job_id] = job
        p.changes.setdefault(job_id, {}).update(changes)
        return job

    def save_run(self, job_id: int, run: Any, changes: Mapping[str, Any]) -> Job:
        """``update_job(job_id, {"run_state": run.to_json(), **changes})``; inside ``batch()`` the run is
        serialized once, at the flush, however many times the batch saves it (an admission saves its run when
        admitted and again with its slots: one ``run_state`` written per transaction). Until then the record's
        ``run_state`` is the run's own fields (read, never changed, by the batch's readers)."""
        p = self._pending()
        if p is None:
            return self._store.update_job(job_id, {"run_state": run.to_json(), **changes})
        job = self.update_job(job_id, changes) if changes else self.get_job(job_id)
        if job is None:
            raise NotFound(f"job {job_id} does not exist")
        job = replace(job, run_state=run.__dict__)
        p.jobs[job_id] = job
        p.runs[job_id] = run
        return job

    def append_event(self, kind: str, message: str = "", **kw: Any) -> Event | None:
        p = self._pending()
        if p is None:
            return self._store.append_event(kind, message, **kw)
        p.events.append({"kind": kind, "message": message, **kw, "ts": kw.get("ts") or db.now()})
        return None
