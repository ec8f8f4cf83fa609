"""A job's spec read back from the store is built without validating it again (it was validated when it was
stored): a restarted control plane with many waiting jobs builds their specs, it does not validate them, and
what it builds is the spec that was stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fairpod.model.jobs import JobSpec
from fairpod.server.runtime.wiring import control_plane
from fairpod.store import jobs as store_jobs
from fairpod.store.jobs import stored_spec

from ..server.inproc import InProc


class Validations:
    """Counts ``JobSpec.model_validate`` calls (the real one runs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        real = JobSpec.model_validate.__func__  # type: ignore[attr-defined]

        def counted(cls: type[JobSpec], obj: Any, *a: Any, **kw: Any) -> JobSpec:
            self.n += 1
            return real(cls, obj, *a, **kw)

        monkeypatch.setattr(JobSpec, "model_validate", classmethod(counted))


SPECS = [
    JobSpec(name="plain", team="john", command=["sleep", "1"]),
    JobSpec(name="elastic", team="john", command=["x"], min_nodes=1, max_nodes=3, env={"A": "1"}),
    JobSpec(name="image", team="john", command=["x"], image="r/x:1", mounts=["/a:/b:ro"], hang_action="cancel",
            log_rules=[{"name": "oom", "pattern": "out of memory", "action": "fail"}]),
]


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_a_stored_spec_is_the_spec_that_was_stored(spec: JobSpec) -> None:
    data = spec.model_dump(mode="json")
    built = stored_spec(data)
    assert built == JobSpec.model_validate(data) and built.model_dump(mode="json") == data
    assert built.model_fields_set == JobSpec.model_validate(data).model_fields_set
    assert built.elastic == spec.elastic and built.nodes == spec.nodes


def test_a_row_without_every_field_is_validated_as_before() -> None:
    data = {"name": "old", "team": "john", "command": ["true"]}  # as an older fairpod may have stored it
    assert stored_spec(data) == JobSpec.model_validate(data)


def test_a_restart_with_waiting_jobs_validates_none_of_their_specs(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    h = InProc(tmp_path)
    for i in range(40):
        h.submit(f"w{i}", "john", 60, nodes=4)  # more than the team may run: most of them wait
    h.turn()
    store_jobs._SPECS.clear()  # a restarted process has built none
    seen = Validations(monkeypatch)
    h.cp = control_plane(h.store, h.executor, h.tmp, clock=h.clock)
    assert len(h.cp.snap.pending) >= 30
    assert seen.n == 0, f"{seen.n} specs validated again at the restart"
    assert {j.spec.command[0] for j in h.store.list_jobs(finished=False)} == {"sleep"}
    h.close()


def test_the_spec_cache_keeps_one_entry_per_job_not_one_per_version(tmp_path: Path) -> None:
    """Every write of a job bumps its row's ``updated_at``; the specs built for reading are kept per job, the
    version read last, not per version: a job read after each of its writes (submitted, admitted, started,
    finished, as a dashboard does) kept an entry per version until 20,000 of them were cleared, ~40 MiB of a
    control plane under a steady load (benchmarks/memory_soak.py)."""
    h = InProc(tmp_path)
    job = h.submit("many", "john", 60)
    store_jobs._SPECS.clear()
    for i in range(12):
        h.store.update_job(job.id, {"reason": f"version {i}"})
        assert h.store.get_job(job.id).spec.command == ["sleep", "60"]
        assert [j.reason for j in h.store.list_jobs() if j.id == job.id] == [f"version {i}"]
    assert len(store_jobs._SPECS) == 1
    h.close()


def test_a_page_of_jobs_whose_specs_are_cached_decodes_none_of_their_json(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``list_jobs`` and ``get_jobs`` read the spec column as its text and decode it only when the cache has no spec
    for that row version: a list page decoded each of its jobs' specs (~30 % of a page's read) before the cache was
    asked (benchmarks/list_page.py). A job changed since is read anew, and every spec is the stored one."""
    h = InProc(tmp_path)
    ids = [h.submit(f"p{i}", "john", 60).id for i in range(20)]
    store_jobs._SPECS.clear()
    first = h.store.list_jobs(team="john")
    decoded: list[str] = []
    real = json.JSONDecoder.decode

    def counted(self: json.JSONDecoder, s: str, *a: Any, **kw: Any) -> Any:
        if '"command"' in s:
            decoded.append(s)
        return real(self, s, *a, **kw)

    monkeypatch.setattr(json.JSONDecoder, "decode", counted)
    again = h.store.list_jobs(team="john")
    some = h.store.get_jobs(ids[:5])
    assert decoded == [] and [j.spec for j in again] == [j.spec for j in first] and len(again) == 20
    assert [some[i].spec for i in ids[:5]] == [j.spec for j in first if j.id in ids[:5]]
    h.store.update_job(ids[0], {"reason": "changed"})
    changed = h.store.get_jobs([ids[0]])[ids[0]]
    assert len(decoded) == 1 and changed.reason == "changed" and changed.spec.command == ["sleep", "60"]
    h.close()
