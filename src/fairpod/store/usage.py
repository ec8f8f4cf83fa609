"""Usage samples: what each instance group and each team used, over time, for trends and usage reports.

The control plane writes one *sample* (a set of rows sharing one ``ts``) whenever usage changes, at most
every few seconds, and a heartbeat sample while nothing changes. A sample lists every series that is not
all zero; a series missing from a sample was zero then. Between two samples the figures of the earlier
one hold (a step function), which is how ``fairpod.server.accounting.usage`` integrates them into hours.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import delete, func, insert, or_, select

from fairpod.store.db import Ops
from fairpod.store.events import to_event
from fairpod.store.jobs import to_job
from fairpod.store.records import Event, Job
from fairpod.store.tables import EventRow, JobRow, UsageSampleRow

GROUP = "group"
TEAM = "team"


@dataclass(frozen=True, slots=True)
class UsageSample:
    """One series at one time. ``kind`` ``group``: ``name`` is an instance group, ``cap_*`` its capacity
    (schedulable or not), ``nodes``/``healthy_nodes`` its node counts. ``kind`` ``team``: ``name`` is a team,
    ``cap_*`` its quota on ``instance_type``, ``borrowed``/``lent`` accelerators."""

    kind: str
    name: str
    instance_type: str
    acc: float = 0.0
    vcpu: float = 0.0
    memory_gib: float = 0.0
    cap_acc: float = 0.0
    cap_vcpu: float = 0.0
    cap_memory_gib: float = 0.0
    borrowed: float = 0.0
    lent: float = 0.0
    nodes: int = 0
    healthy_nodes: int = 0
    ts: float = 0.0

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.name, self.instance_type)


FIGURES = ("acc", "vcpu", "memory_gib", "cap_acc", "cap_vcpu", "cap_memory_gib", "borrowed", "lent", "nodes",
         "healthy_nodes")  # fmt: skip


# UsageSample's fields in their order, as columns (list_usage builds each sample from one tuple; a test checks
# the order: tests/store/test_usage.py)
_SELECT = (UsageSampleRow.kind, UsageSampleRow.name, UsageSampleRow.instance_type,
           *(getattr(UsageSampleRow, c) for c in FIGURES), UsageSampleRow.ts)


class UsageOps(Ops):
    def append_usage(self, ts: float, samples: Iterable[UsageSample]) -> int:
        """Write one sample: every given series at time ``ts``. Returns the number of rows written."""
        rows = []
        for s in samples:
            if s.kind not in (GROUP, TEAM):
                raise ValueError(f"usage.kind: {s.kind!r} is not one of {GROUP}, {TEAM}")
            rows.append({"ts": float(ts), "kind": s.kind, "name": s.name, "instance_type": s.instance_type,
                         **{c: getattr(s, c) for c in FIGURES}})
        if rows:  # one multi-row insert of plain rows: a sample of 500 teams on 10 instance types is ~5,000 rows,
            # and as ORM objects they took ~0.13 s of the reconcile turn that wrote them (benchmarks/turn_cost.py)
            with self._session(True) as sess:
                sess.execute(insert(UsageSampleRow), rows)
        return len(rows)

    def list_usage(self, since: float, until: float, kind: str | None = None) -> list[UsageSample]:
        """Every row of the samples with since <= ts <= until, oldest first, preceded by the sample just
        before ``since`` (the figures in force at ``since``). Both kinds are written together, so the
        distinct ``ts`` of the result are the sample times even where one kind has no row. ``kind``: that
        kind's rows only (``group``: every sample has a row per instance group, so its times are all there)."""
        with self._session(False) as sess:
            start = sess.scalar(select(func.max(UsageSampleRow.ts)).where(UsageSampleRow.ts < since))
            q = (select(*_SELECT)
                 .where(UsageSampleRow.ts >= (since if start is None else start), UsageSampleRow.ts <= until)
                 .order_by(UsageSampleRow.ts, UsageSampleRow.id))
            if kind is not None:
                q = q.where(UsageSampleRow.kind == kind)
            # the columns, not rows of the ORM: a day of 500 teams' samples is ~100,000 rows (seconds as objects)
            rows = cast("list[tuple[Any, ...]]", sess.execute(q).all())  # _SELECT's columns, in UsageSample's order
            return [UsageSample(*r) for r in rows]

    def jobs_between(self, since: float, until: float, teams: Iterable[str] | None = None) -> list[Job]:
        """Jobs submitted before ``until`` that had not finished before ``since``, in submission order."""
        q = select(JobRow).where(JobRow.submit_time < until,
                                 or_(JobRow.finished_at.is_(None), JobRow.finished_at >= since))
        if teams is not None:
            q = q.where(JobRow.team.in_(list(teams)))
        with self._session(False) as sess:
            return [to_job(r) for r in sess.scalars(q.order_by(JobRow.seq))]

    def job_lifecycle_events(self, job_ids: Iterable[int], kinds: Iterable[str]) -> list[Event]:
        """The events of the given kinds of the given jobs, oldest first (for their run windows)."""
        ids = sorted(set(job_ids))
        out: list[Event] = []
        with self._session(False) as sess:
            for i in range(0, len(ids), 500):
                q = (select(EventRow).where(EventRow.job_id.in_(ids[i:i + 500]), EventRow.kind.in_(list(kinds)))
                     .order_by(EventRow.id))
                out.extend(to_event(r) for r in sess.scalars(q))
        out.sort(key=lambda e: e.id)
        return out

    def usage_span(self) -> tuple[float | None, float | None]:
        """The times of the first and the last usage sample kept (None, None if there is none)."""
        with self._session(False) as sess:
            lo, hi = sess.execute(select(func.min(UsageSampleRow.ts), func.max(UsageSampleRow.ts))).one()
            return lo, hi

    def prune_usage(self, before: float) -> int:
        """Delete the samples older than ``before`` (retention). Returns the number of rows deleted."""
        with self._session(True) as sess:
            res = sess.execute(delete(UsageSampleRow).where(UsageSampleRow.ts < before))
            return int(res.rowcount or 0)  # type: ignore[attr-defined]
