"""The jobs other processes committed (API workers, ``fairpod api``) join the engine's queue at the core's next turn
(``core.foreign.Foreign``) with the workload the core would build from the whole job, read from the engine's
fields of their rows (``Store.engine_jobs``): the whole job only where those fields need the spec (a service,
several instance types), never each job read back whole."""

from __future__ import annotations

import dataclasses
from typing import Any

from fairpod.model.jobs import JobSpec, JobState, resolve_job
from fairpod.server.core import Foreign
from fairpod.store import Store

from ..inproc import InProc

SHAPES: list[dict[str, Any]] = [  # what the engine's fields tell apart (the seed spec's teams and types)
    {"name": "plain"},
    {"name": "elastic", "min_nodes": 1, "max_nodes": 3},
    {"name": "svc", "service": {}, "max_nodes": 2},
    {"name": "ray", "ray": True, "nodes": 2},
    {"name": "fallbacks", "instance_type": "ml.g5.12xlarge,ml.g5.48xlarge"},
    {"name": "topo", "required_topology": "rack", "nodes": 2},
    {"name": "prefers", "preferred_topology": "rack"},
    {"name": "mine", "user": "mia", "deep_health_check_passed_nodes_only": True, "priority": "inference"},
    {"name": "odd", "expected_duration_seconds": 0.1 + 0.2, "min_runtime_seconds": 123.456},
]


def fields(w: Any) -> dict[str, Any]:
    return {f.name: getattr(w, f.name) for f in dataclasses.fields(w)}


def test_jobs_committed_elsewhere_join_the_queue_as_whole_jobs_would_without_being_read_whole(
        h: InProc, monkeypatch: Any) -> None:
    cp, store = h.cp, h.store
    foreign = Foreign(store.last_seq())
    spec = store.get_spec()
    assert spec is not None
    resolved = resolve_job(JobSpec(name="x", team="john", command=["true"]), spec.spec)  # the row's columns
    jobs = {}
    for kw in SHAPES:  # committed as a worker commits them: rows in the store the core's memory does not know
        js = JobSpec.model_validate({"team": "john", "command": ["sleep", "60"], **kw})
        jobs[js.name] = store.insert_job(js, resolved)
    gone = store.insert_job(JobSpec(name="gone", team="smith", command=["true"]), resolved)
    store.update_job(gone.id, {"state": JobState.CANCELLED})  # cancelled before the core's turn: passed over
    whole: list[int] = []
    real = Store.get_jobs

    def get_jobs(self: Store, ids: Any) -> Any:
        ids = list(ids)
        whole.extend(ids)
        return real(self, ids)

    monkeypatch.setattr(Store, "get_jobs", get_jobs)
    with cp.lock:
        foreign.take(cp)
    assert foreign.taken == len(SHAPES)
    monkeypatch.undo()
    pending = {w.id: w for w in cp.snap.pending.values()}
    for job in jobs.values():
        w = cp.workload(store.get_job(job.id) or job)  # what the core builds from the whole job
        assert fields(pending[w.id]) == fields(w), job.name
    assert len(pending) == len(SHAPES)
    # the whole job read only for the engine fields a spec's JSON alone gives (a service, several types)
    assert sorted(whole) == sorted([jobs["svc"].id, jobs["fallbacks"].id])
    with cp.lock:
        foreign.take(cp)  # nothing new: nothing more taken in
    assert foreign.taken == len(SHAPES)
