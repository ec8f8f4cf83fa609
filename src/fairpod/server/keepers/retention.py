"""Retention: once an hour the reconcile loop deletes what ``policy.retention_days`` no longer keeps (finished
jobs with their events and run files, old events, usage samples and idempotency keys; see
``fairpod.store.retention``). A big first prune is done in batches, one per reconcile turn."""

from __future__ import annotations

import logging
import math

from sqlalchemy.exc import SQLAlchemyError

from fairpod.executors.base import Discarding, capability
from fairpod.model.keys import run_key
from fairpod.server.core.api import Core
from fairpod.store import StoreError

log = logging.getLogger("fairpod.retention")

EVERY = 3600.0  # seconds between prunes
BATCH = 5_000  # finished jobs deleted per reconcile turn at most


class Retention:
    def __init__(self, every: float = EVERY, batch: int = BATCH) -> None:
        self.every = every
        self.batch = batch
        self.last = -math.inf
        self.deleted_jobs = 0

    def tick(self, cp: Core) -> None:
        days = cp.spec.policy.retention_days
        now = cp.clock()
        if days is None or now - self.last < self.every:
            return
        try:
            pruned = cp.prune(now - days * 86400.0, self.batch)
        except (StoreError, SQLAlchemyError) as e:  # a locked or full database must not stop scheduling
            log.warning("could not delete old records: %s", e)
            return
        self.last = -math.inf if pruned.more else now
        files = capability(cp.executor, Discarding)
        for job_id, name in pruned.jobs:
            if files is not None:
                files.discard(run_key(name, job_id))
        self.deleted_jobs += len(pruned.jobs)
        if pruned.total:
            log.info("retention (%g days): deleted %d finished jobs, %d events, %d usage rows, %d submit keys",
                     days, len(pruned.jobs), pruned.events, pruned.usage_rows, pruned.submit_keys)
