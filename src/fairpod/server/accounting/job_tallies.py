"""What ``/metrics`` counts of the job records (finished jobs by state, the admission-wait and run-time
histograms), kept as totals that each scrape brings up to date by reading only the jobs that started or ended
since the previous one, so a scrape's cost does not grow with the jobs the store keeps.

A job's ``first_started_at`` and ``finished_at`` are each written once (the first admission, the end), by the
control plane under its lock, from its clock: read in that order (indexes ``ix_jobs_first_started_at`` and
``ix_jobs_finished_at``), each scrape reads the rows from the last time it saw minus ``OVERLAP`` seconds (a
commit that came a little late, a clock that stepped back a little) and skips the ones it already counted.
The first scrape of a control plane reads them all once, so the totals are the store's after a restart.
A job that retention later deletes stays counted: these are counters.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any, cast

from sqlalchemy import Engine, select

from fairpod.store.tables import FINISHED_STATES, JobRow

OVERLAP = 10.0  # seconds read again at each scrape


class Histogram:
    """Per team: cumulative bucket counts, count and sum."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.teams: dict[str, tuple[list[int], int, float]] = {}

    def observe(self, team: str, value: float) -> None:
        counts, n, total = self.teams.get(team) or ([0] * len(self.buckets), 0, 0.0)
        for i, b in enumerate(self.buckets):
            if value <= b:
                counts[i] += 1
        self.teams[team] = (counts, n + 1, total + value)


class Cursor:
    """The rows of one time column read so far: the latest time seen, and the ids seen within ``OVERLAP``
    of it (the ones the next read sees again)."""

    def __init__(self) -> None:
        self.last: float | None = None
        self.recent: dict[int, float] = {}

    def since(self) -> float | None:
        return None if self.last is None else self.last - OVERLAP

    def new(self, jid: int, ts: float) -> bool:
        if jid in self.recent:
            return False
        self.recent[jid] = ts
        self.last = ts if self.last is None else max(self.last, ts)
        return True

    def prune(self) -> None:
        if self.last is not None:
            edge = self.last - OVERLAP
            self.recent = {j: t for j, t in self.recent.items() if t >= edge}


class JobTallies:
    def __init__(self, wait_buckets: tuple[float, ...], run_buckets: tuple[float, ...]) -> None:
        self.wait = Histogram(wait_buckets)
        self.run = Histogram(run_buckets)
        self.finished: dict[tuple[str, str], int] = {}
        self.rows_read = 0  # what the scrapes read so far (docs, benchmarks)
        self._started = Cursor()
        self._ended = Cursor()
        self.lock = threading.Lock()

    def update(self, engine: Engine) -> None:
        with self.lock, engine.connect() as conn:
            q: Any = select(JobRow.id, JobRow.team, JobRow.submit_time, JobRow.first_started_at).where(
                JobRow.first_started_at.is_not(None))
            if (since := self._started.since()) is not None:
                q = q.where(JobRow.first_started_at >= since)
            started = cast("Iterable[tuple[int, str, float, float]]", conn.execute(q.order_by(JobRow.first_started_at)))
            for jid, team, submitted, first in started:  # first_started_at set: the query's where
                self.rows_read += 1
                if self._started.new(jid, first):
                    self.wait.observe(team, first - submitted)
            self._started.prune()
            q = (select(JobRow.id, JobRow.team, JobRow.state, JobRow.first_started_at, JobRow.finished_at)
                 .where(JobRow.finished_at.is_not(None)))
            if (since := self._ended.since()) is not None:
                q = q.where(JobRow.finished_at >= since)
            ended = cast("Iterable[tuple[int, str, str, float | None, float]]", conn.execute(q.order_by(JobRow.finished_at)))
            for jid, team, state, began, end in ended:  # finished_at set: the query's where
                self.rows_read += 1
                if state not in FINISHED_STATES or not self._ended.new(jid, end):
                    continue
                self.finished[(team, state)] = self.finished.get((team, state), 0) + 1
                if began is not None:
                    self.run.observe(team, end - began)
            self._ended.prune()
