"""Usage rollups in the store: each series' figures summed per time bucket (``fairpod.server.accounting.rollups`` writes and
reads them; the samples themselves are in ``fairpod.store.usage``).

A resolution ``res`` (seconds) has rows for its buckets ``[t0, t0 + res)`` up to its *mark*: a row of kind ``mark``
whose ``t0`` is the time up to which that resolution is written (buckets that no sample covered have no rows, so
the mark says where the written part ends). A bucket's rows and the new mark are written in one transaction.
A deletion sets a mark too, in its transaction: that of ``-res`` says before when the buckets of ``res`` are
deleted, that of ``SAMPLES_DELETED`` before when the samples are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session

from fairpod.store.db import Ops
from fairpod.store.tables import UsageRollupRow, UsageSampleRow
from fairpod.store.usage import FIGURES

MARK = "mark"
SAMPLES_DELETED = 0  # the "resolution" whose mark says before when the samples are deleted
# a rollup row as list_rollups returns it: t0, kind, name, instance_type, covered, then FIGURES in that order
Rollup = tuple[Any, ...]
_SELECT = (UsageRollupRow.t0, UsageRollupRow.kind, UsageRollupRow.name, UsageRollupRow.instance_type,
           UsageRollupRow.covered, *(getattr(UsageRollupRow, f) for f in FIGURES))


class RollupOps(Ops):
    def rollup_marks(self) -> dict[int, float]:
        """Per resolution, the time up to which its buckets are written."""
        with self._session(False) as sess:
            return {int(r): float(t) for r, t in sess.execute(
                select(UsageRollupRow.res, UsageRollupRow.t0).where(UsageRollupRow.kind == MARK))}

    def list_rollups(self, res: int, t_from: float, t_to: float, kind: str | None = None) -> list[Rollup]:
        """The rows of the buckets of ``res`` with ``t_from <= t0 < t_to`` (see ``Rollup``), by t0; ``kind``: of
        that kind only."""
        with self._session(False) as sess:
            q = (select(*_SELECT).where(UsageRollupRow.res == res, UsageRollupRow.t0 >= t_from,
                                        UsageRollupRow.t0 < t_to, UsageRollupRow.kind != MARK)
                 .order_by(UsageRollupRow.t0))
            if kind is not None:
                q = q.where(UsageRollupRow.kind == kind)
            return [tuple(r) for r in sess.execute(q).all()]

    def write_rollups(self, res: int, rows: Iterable[Rollup], mark: float) -> int:
        """Add the buckets ``rows`` of ``res`` (see ``Rollup``) and move its mark to ``mark``, in one transaction;
        rows already written at or after the old mark (none, unless written without it) are replaced."""
        new = [{"res": res, "t0": r[0], "kind": r[1], "name": r[2], "instance_type": r[3], "covered": r[4],
                **dict(zip(FIGURES, r[5:], strict=True))} for r in rows]
        with self._session(True) as sess:
            old = sess.scalar(select(UsageRollupRow.t0).where(UsageRollupRow.res == res, UsageRollupRow.kind == MARK))
            if old is not None:
                sess.execute(delete(UsageRollupRow).where(UsageRollupRow.res == res, UsageRollupRow.t0 >= old,
                                                          UsageRollupRow.kind != MARK))
            if new:
                sess.execute(insert(UsageRollupRow), new)  # one statement for all rows (not an object each)
            _set_mark(sess, res, mark)
        return len(new)

    def first_usage_after(self, t: float) -> float | None:
        """The time of the first sample at or after ``t`` (None if there is none)."""
        with self._session(False) as sess:
            got = sess.scalar(select(func.min(UsageSampleRow.ts)).where(UsageSampleRow.ts >= t))
            return None if got is None else float(got)

    def nth_usage_after(self, t: float, n: int) -> float | None:
        """The time of the ``n``-th sample after the first at or after ``t`` (None if there are not that many)."""
        with self._session(False) as sess:
            got = sess.scalar(select(UsageSampleRow.ts).where(UsageSampleRow.ts >= t).distinct()
                              .order_by(UsageSampleRow.ts).offset(n).limit(1))
            return None if got is None else float(got)

    def last_usage_before(self, t: float) -> float | None:
        """The time of the last sample before ``t`` (None if there is none)."""
        with self._session(False) as sess:
            got = sess.scalar(select(func.max(UsageSampleRow.ts)).where(UsageSampleRow.ts < t))
            return None if got is None else float(got)

    def prune_rollups(self, res: int, before: float) -> int:
        """Delete the buckets of ``res`` from before ``before`` and, if there were any, set the mark of ``-res`` to
        ``before`` (what a reader checks), in one transaction. Returns the rows deleted."""
        return self._prune(delete(UsageRollupRow).where(UsageRollupRow.res == res, UsageRollupRow.t0 < before,
                                                        UsageRollupRow.kind != MARK), -res, before)

    def prune_rolled_samples(self, before: float) -> int:
        """Delete the samples from before ``before`` (rolled up) and, if there were any, set the mark of
        ``SAMPLES_DELETED`` to ``before``, in one transaction. Returns the rows deleted."""
        return self._prune(delete(UsageSampleRow).where(UsageSampleRow.ts < before), SAMPLES_DELETED, before)

    def _prune(self, q: Any, mark: int, before: float) -> int:
        with self._session(True) as sess:
            got = int(sess.execute(q).rowcount or 0)  # type: ignore[attr-defined]
            if got:
                _set_mark(sess, mark, before)
            return got

    def first_rollup(self, res: int | None = None) -> float | None:
        """The start of the oldest bucket kept of ``res`` (of any resolution by default; None if there is none)."""
        q = select(func.min(UsageRollupRow.t0)).where(UsageRollupRow.kind != MARK)
        if res is not None:
            q = q.where(UsageRollupRow.res == res)
        with self._session(False) as sess:
            got = sess.scalar(q)
            return None if got is None else float(got)


def _set_mark(sess: Session, res: int, t: float) -> None:
    """The mark of ``res`` is ``t`` from now on (one row of kind ``mark`` per ``res``)."""
    sess.execute(delete(UsageRollupRow).where(UsageRollupRow.res == res, UsageRollupRow.kind == MARK))
    sess.add(UsageRollupRow(res=res, t0=t, kind=MARK, name="", instance_type="", covered=0.0,
                            **dict.fromkeys(FIGURES, 0.0)))
