"""The memory of a restarted control plane is built from ``Store.engine_jobs``: the unfinished jobs' columns and the
few fields of their specs the engine reads, picked out of the stored JSON by the database, not each job read back
whole. What that read gives must be, field for field, what the whole job gives (``EngineJob.of``), on SQLite and on
PostgreSQL, for jobs of every shape the engine tells apart: elastic, a service, a space, Ray, several instance
types, a topology, a user, durations that are no round number, an array with a throttle, running (placement,
borrowed quota, run state) and preempted ones, a restart backing off, and a row an older fairpod wrote."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy import update

from fairpod.model.jobs import JobSpec, JobState, resolve_job
from fairpod.model.spec import ClusterSpec
from fairpod.store import Store
from fairpod.store.records import EngineJob
from fairpod.store.tables import JobRow

# every shape the engine's fields tell apart (the seed spec's teams and instance types)
SHAPES: list[dict[str, Any]] = [
    {"name": "plain"},
    {"name": "elastic", "min_nodes": 1, "max_nodes": 3},
    {"name": "svc", "service": {}, "max_nodes": 2},
    {"name": "ray", "ray": True, "nodes": 2},
    {"name": "fallbacks", "instance_type": "ml.g5.12xlarge,ml.g5.48xlarge"},
    {"name": "space", "service": {"space": {"ide": "jupyter"}}},
    {"name": "topo", "required_topology": "rack", "nodes": 2},
    {"name": "prefers", "preferred_topology": "rack"},
    {"name": "mine", "user": "mia", "deep_health_check_passed_nodes_only": True},
    {"name": "odd", "expected_duration_seconds": 0.1 + 0.2, "min_runtime_seconds": 123.456},
    {"name": "tiny", "expected_duration_seconds": 1e-7, "min_runtime_seconds": 7},
]


def whole(store: Store) -> list[EngineJob]:
    return [EngineJob.of(j) for j in store.list_jobs(finished=False)]


def without_spec(jobs: list[EngineJob]) -> list[EngineJob]:
    return [replace(e, spec=None) for e in jobs]


def test_the_light_read_is_the_whole_read_field_for_field(store: Store, cluster: ClusterSpec) -> None:
    """On SQLite here, on PostgreSQL in ``test_store_postgres.py``."""
    s = store
    s.put_spec(cluster)
    resolved = resolve_job(JobSpec(name="x", team="john", command=["true"]), cluster)  # the row's columns only
    jobs = {}
    for kw in SHAPES:
        spec = JobSpec.model_validate({"team": "john", "command": ["sleep", "60"], **kw})
        jobs[spec.name] = s.insert_job(spec, resolved)
    arr = [JobSpec(name=f"arr-{i}", team="smith", command=["true"]) for i in range(3)]
    tasks = s.insert_tasks(arr, resolved, ["queued"] * 3, 1000, 1)
    s.update_job(jobs["plain"].id, {"state": JobState.RUNNING, "placement": ["n1", "n2"], "attempt": 2,
                                    "borrowed_from": {"smith": {"accelerators": 8}}, "started_at": 1.5,
                                    "run_state": {"slots": {"n1": [0, 1]}, "launched": True}})
    s.update_job(jobs["elastic"].id, {"state": JobState.RUNNING, "nodes": 2, "run_state": {"shrunk_at": 12.25}})
    s.update_job(jobs["ray"].id, {"state": JobState.PREEMPTED, "reason": "Preempted", "preemptions": 1})
    s.update_job(jobs["topo"].id, {"run_state": {"restart_not_before": 1e12}, "checkpoint_at": 3.0})
    s.update_job(tasks[1].id, {"state": JobState.SUCCEEDED})  # finished: in neither read
    older = s.insert_job(JobSpec(name="older", team="john", command=["true"]), resolved)
    with s.engine.begin() as conn:  # as an older fairpod stored it: fields missing from the spec's JSON
        conn.execute(update(JobRow).where(JobRow.id == older.id)
                     .values(spec={"name": "older", "team": "john", "command": ["true"]}))
    light, full = s.engine_jobs(), whole(s)
    assert [e.id for e in light] == [e.id for e in full]  # the same jobs in the same order (seq)
    assert without_spec(light) == without_spec(full)
    # the whole spec comes along only where the engine's fields need it
    assert {e.name for e in light if e.spec is not None} == {"svc", "space", "fallbacks", "older"}
    for e in light:
        if e.spec is not None:
            assert e.spec == next(f.spec for f in full if f.id == e.id)
    by = {e.name: e for e in light}
    assert [by[n].kind for n in ("svc", "space", "ray", "plain")] == ["service", "job", "ray", "job"]
    # some jobs by id (the core's Foreign takes in the jobs API workers committed so): the same records, in seq
    # order, the finished task and unknown ids left out
    some = [jobs["svc"].id, tasks[1].id, jobs["plain"].id, older.id, 10**9, jobs["fallbacks"].id]
    assert s.engine_jobs(some) == [e for e in light if e.id in some]
    assert s.engine_jobs([]) == []
