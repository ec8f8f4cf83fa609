"""The cluster spec (one versioned row) and the small meta key/value table."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from fairpod.model.logrules import STORED
from fairpod.model.spec import ClusterSpec
from fairpod.store.db import Ops
from fairpod.store.records import Conflict, NotFound, SpecRecord, SpecVersion
from fairpod.store.tables import ClusterRow, CounterRow, MetaRow, SpecVersionRow, table

CLUSTER_ROW_ID = 1
_CLUSTER = table(ClusterRow)
_SPEC_VERSION = select(_CLUSTER.c.version).where(_CLUSTER.c.id == CLUSTER_ROW_ID)


def next_counter(s: Session, name: str) -> int:
    """Bump counter ``name`` and return its new value, atomically within the caller's write transaction."""
    row = s.get(CounterRow, name, with_for_update=True)
    if row is None:
        row = CounterRow(name=name, value=0)
        s.add(row)
    row.value += 1
    s.flush()
    return row.value


class ClusterOps(Ops):
    def get_spec(self) -> SpecRecord | None:
        """The stored cluster spec with its version, or None before the first ``put_spec``."""
        with self._session(False) as s:
            row = s.get(ClusterRow, CLUSTER_ROW_ID)
            if row is None:
                return None
            return SpecRecord(ClusterSpec.model_validate(row.spec, context={STORED: True}), row.version, row.updated_at)

    def put_spec(
        self, spec: ClusterSpec, *, expected_version: int | None = None, now: float | None = None,
        actor: str = "fairpod", action: str = "spec.apply",
    ) -> SpecRecord:
        """Save the whole spec (validate it with ``parse_spec`` first) and bump the version by one; the new
        version also goes into the spec history with ``actor`` and ``action``.

        With ``expected_version`` (0 = no spec stored yet) the save is a compare-and-set: it raises
        ``Conflict`` if someone else saved in between.
        """
        if not isinstance(spec, ClusterSpec):
            raise TypeError(f"put_spec wants a ClusterSpec, not {type(spec).__name__}")
        data = spec.model_dump(mode="json")
        ts = self._now(now)
        with self._session(True) as s:
            row = s.get(ClusterRow, CLUSTER_ROW_ID, with_for_update=True)
            current = 0 if row is None else row.version
            if expected_version is not None and expected_version != current:
                raise Conflict(f"the spec is at version {current}, not {expected_version}")
            if row is None:
                row = ClusterRow(id=CLUSTER_ROW_ID, spec=data, version=1, updated_at=ts)
                s.add(row)
            else:
                row.spec = data
                row.version = current + 1
                row.updated_at = ts
            s.merge(SpecVersionRow(version=row.version, spec=data, applied_at=ts, actor=actor[:64],
                                   action=action[:64]))
            s.flush()
            return SpecRecord(spec.model_copy(deep=True), row.version, ts)

    def spec_history(self, limit: int = 100) -> list[SpecVersion]:
        """The newest ``limit`` spec versions, newest first (without their specs)."""
        with self._session(False) as s:
            q = select(SpecVersionRow.version, SpecVersionRow.applied_at, SpecVersionRow.actor,
                       SpecVersionRow.action).order_by(SpecVersionRow.version.desc()).limit(limit)
            return [SpecVersion(v, at, actor, action, None) for v, at, actor, action in s.execute(q)]

    def spec_at(self, version: int) -> SpecVersion:
        """One version of the spec; ``NotFound`` if the history does not hold it."""
        with self._session(False) as s:
            row = s.get(SpecVersionRow, version)
            if row is None:
                raise NotFound(f"spec version {version} is not in the history")
            return SpecVersion(row.version, row.applied_at, row.actor, row.action,
                               ClusterSpec.model_validate(row.spec, context={STORED: True}))

    def spec_version(self) -> int:
        """The stored spec's version; 0 before the first save."""
        with self._session(False) as s:  # a Core statement built once: an API worker reads it in each group of submits
            v = s.connection().execute(_SPEC_VERSION).scalar()
            return 0 if v is None else v

    def get_meta(self, key: str) -> str | None:
        with self._session(False) as s:
            row = s.get(MetaRow, key)
            return None if row is None else row.value

    def set_meta(self, key: str, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError("meta values are strings")
        with self._session(True) as s:
            row = s.get(MetaRow, key, with_for_update=True)
            if row is None:
                s.add(MetaRow(key=key, value=value))
            else:
                row.value = value

    def delete_meta(self, key: str) -> bool:
        with self._session(True) as s:
            row = s.get(MetaRow, key)
            if row is None:
                return False
            s.delete(row)
            return True
