"""Retention: delete what is older than the policy keeps (``policy.retention_days``).

Finished jobs (their ``finished_at`` before the cut), events, usage samples and idempotency keys (their time
before the cut). Unfinished jobs are never deleted, whatever their age; the audit log is kept whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, select

from fairpod.store.db import Ops
from fairpod.store.rollups import MARK
from fairpod.store.tables import (
    FINISHED_STATES,
    EventRow,
    JobRow,
    SubmitKeyRow,
    UsageRollupRow,
    UsageSampleRow,
)


@dataclass(frozen=True, slots=True)
class Pruned:
    """What one ``prune`` deleted. ``jobs`` are the (id, name) of the deleted jobs (their run files can go too);
    ``more`` is True when ``limit`` cut it short (call again)."""

    jobs: tuple[tuple[int, str], ...]
    events: int
    usage_rows: int
    submit_keys: int
    more: bool

    @property
    def total(self) -> int:
        return len(self.jobs) + self.events + self.usage_rows + self.submit_keys


class RetentionOps(Ops):
    def prune(self, before: float, *, limit: int = 5_000) -> Pruned:
        """Delete finished jobs that finished before ``before`` (at most ``limit`` of them, oldest first),
        and events, usage samples and submit keys older than ``before``; all in one transaction."""
        with self._session(True) as s:
            rows = [(int(i), str(n)) for i, n in s.execute(
                select(JobRow.id, JobRow.name).where(JobRow.finished_at < before, JobRow.state.in_(FINISHED_STATES))
                .order_by(JobRow.finished_at).limit(limit + 1))]  # fmt: skip
            more = len(rows) > limit
            rows = rows[:limit]
            ids = [i for i, _ in rows]
            if ids:
                s.execute(delete(EventRow).where(EventRow.job_id.in_(ids)))
                s.execute(delete(SubmitKeyRow).where(SubmitKeyRow.job_id.in_(ids)))
                s.execute(delete(JobRow).where(JobRow.id.in_(ids)))
            events = s.execute(delete(EventRow).where(EventRow.ts < before)).rowcount or 0  # type: ignore[attr-defined]
            usage = s.execute(delete(UsageSampleRow).where(UsageSampleRow.ts < before)).rowcount or 0  # type: ignore[attr-defined]
            usage += s.execute(delete(UsageRollupRow).where(UsageRollupRow.t0 < before,  # its mark stays
                                                            UsageRollupRow.kind != MARK)).rowcount or 0  # type: ignore[attr-defined]
            keys = s.execute(delete(SubmitKeyRow).where(SubmitKeyRow.created_at < before)).rowcount or 0  # type: ignore[attr-defined]
        return Pruned(tuple(rows), int(events), int(usage), int(keys), more)
