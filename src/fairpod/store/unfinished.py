"""The unfinished jobs as the control plane's memory is built from them (at start-up, after a spec change, after a
failed write): ``EngineJob`` records read in one query in submission order, the columns as they are and the few
fields of the spec the engine reads picked out of the stored JSON by the database (SQLite's ``->`` and
``json_extract``, PostgreSQL's ``->>``), so no job's whole spec is decoded and no ``JobSpec`` built. At 10,000
nodes a restart read ~127,000 jobs back whole, and decoding their specs and building their records was most of it
(``benchmarks/recovery.py``).

Numbers of the spec are read as the JSON's own text and parsed as ``json.loads`` parses them (SQLite's own
conversion of a decimal to a float is not always the nearest one), so a workload built from a record of this
read is the one built from the whole job (``EngineJob.of``), field for field.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from sqlalchemy import Label, Text, cast, literal_column, select

from fairpod.model.jobs import JobState
from fairpod.store.db import Ops
from fairpod.store.records import EngineJob
from fairpod.store.tables import FINISHED_STATES, JobRow, table

_J = table(JobRow)
_COLUMNS = (_J.c.id, _J.c.name, _J.c.team, _J.c.state, _J.c.reason, _J.c.priority, _J.c.instance_type, _J.c.nodes,
            _J.c.acc, _J.c.mcpu, _J.c.mib, _J.c.submit_time, _J.c.seq, _J.c.enqueued_at, _J.c.started_at,
            _J.c.attempt, cast(_J.c.placement, Text), cast(_J.c.borrowed_from, Text),
            _J.c.preemptions, cast(_J.c.run_state, Text), _J.c.checkpoint_at, _J.c.array_id,
            _J.c.array_limit)  # fmt: skip
# the spec's fields: (key, how the value is read: number as its JSON text, int, bool, text)
_FIELDS = (("nodes", "int"), ("max_nodes", "int"), ("expected_duration_seconds", "num"),
           ("min_runtime_seconds", "num"), ("deep_health_check_passed_nodes_only", "bool"), ("user", "text"),
           ("required_topology", "text"), ("preferred_topology", "text"), ("ray", "bool"), ("instance_type", "text"),
           ("service", "text"))  # fmt: skip
_REQUIRED = {"nodes", "min_runtime_seconds", "deep_health_check_passed_nodes_only", "ray"}  # no null in a spec
_SQL = {  # the value of the spec's ``k`` as ``how`` says, per dialect (the keys are this module's, never a user's)
    "sqlite": {"num": "jobs.spec -> '$.{k}'", "int": "json_extract(jobs.spec, '$.{k}')",
               "bool": "json_extract(jobs.spec, '$.{k}')", "text": "json_extract(jobs.spec, '$.{k}')"},
    "postgresql": {"num": "jobs.spec ->> '{k}'", "int": "(jobs.spec ->> '{k}')::bigint",
                   "bool": "(jobs.spec ->> '{k}')::boolean", "text": "jobs.spec ->> '{k}'"},
}
_QUERIES: dict[str, Any] = {}


def _query(dialect: str) -> Any:
    q = _QUERIES.get(dialect)
    if q is None:
        sql = _SQL["postgresql" if dialect == "postgresql" else "sqlite"]
        spec: list[Label[Any]] = [literal_column(sql[how].format(k=k)).label(f"s_{k}") for k, how in _FIELDS]
        q = _QUERIES[dialect] = (select(*_COLUMNS, *spec).where(_J.c.state.not_in(FINISHED_STATES))
                                 .order_by(_J.c.seq).execution_options(yield_per=5000))  # streamed  # fmt: skip
    return q


def _json(text: str | None) -> Any:
    """A JSON column's value from its text (the common empty ones without the decoder)."""
    if text is None or text == "null":
        return None
    if text == "[]":
        return []
    if text == "{}":
        return {}
    return json.loads(text)


_NUMBERS: dict[str, Any] = {}  # JSON text -> number: a queue's jobs share a few values (0.0, 3600.0)


def _number(text: str | None) -> Any:
    """A number of the spec from its JSON text, as ``json.loads`` reads it (an int without a fraction or exponent)."""
    if text is None or text == "null":
        return None
    v = _NUMBERS.get(text)
    if v is None:
        v = float(text) if any(c in text for c in ".eEnN") else int(text)
        if len(_NUMBERS) < 10_000:
            _NUMBERS[text] = v
    return v


class UnfinishedOps(Ops):
    def engine_jobs(self, job_ids: Iterable[int] | None = None) -> list[EngineJob]:
        """Every unfinished job as ``EngineJob``, in submission order (``seq``); the whole spec read (in one more
        query) only for the few whose engine fields need it (``EngineJob.spec``). ``job_ids``: only those (the
        core's ``Foreign`` takes in the jobs API workers committed this way, not each read back whole)."""
        out: list[EngineJob] = []
        whole: list[int] = []  # rows whose spec is read whole
        with self._session(False) as s:
            conn = s.connection()
            q = _query(conn.dialect.name)
            if job_ids is not None:
                ids = list(job_ids)
                if not ids:
                    return out
                q = q.where(_J.c.id.in_(ids))
            # the query is built per dialect (_query: Any): its rows' items typed here, as _COLUMNS and _FIELDS say
            for r in typing.cast("Iterable[tuple[Any, ...]]", conn.execute(q)):
                (jid, name, team, state, reason, prio, itype, nodes, acc, mcpu, mib, submit, seq, enq, started,
                 attempt, placement, borrowed, preempts, run_state, ckpt, aid, alimit,
                 s_nodes, s_max, s_exp, s_min, s_passed, s_user, s_req, s_pref, s_ray, s_itype, s_service) = r
                if s_service is not None or "," in (s_itype or "") or None in (s_nodes, s_min, s_passed, s_ray):
                    whole.append(jid)
                out.append(EngineJob(
                    jid, name, team, JobState(state), reason, prio, itype, nodes, acc, mcpu, mib, submit, seq, enq,
                    started, attempt, _json(placement) or [], _json(borrowed) or {}, preempts, _json(run_state),
                    ckpt, aid, alimit, "ray" if s_ray else "job", s_nodes, s_max, _number(s_exp), _number(s_min),
                    bool(s_passed), s_user, s_req, s_pref,
                ))  # fmt: skip
        if not whole:
            return out
        specs = {jid: job.spec for jid, job in self.get_jobs(whole).items()}  # type: ignore[attr-defined]
        for i, e in enumerate(out):
            sp = specs.get(e.id)
            if sp is not None:
                out[i] = replace(e, kind=sp.kind, spec_nodes=sp.nodes, max_nodes=sp.max_nodes,
                                 expected_duration_seconds=sp.expected_duration_seconds,
                                 min_runtime_seconds=sp.min_runtime_seconds,
                                 passed_only=sp.deep_health_check_passed_nodes_only, user=sp.user,
                                 required_topology=sp.required_topology, preferred_topology=sp.preferred_topology,
                                 spec=sp)  # fmt: skip
        return out
