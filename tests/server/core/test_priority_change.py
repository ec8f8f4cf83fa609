"""A job's priority changed after submission (``ControlPlane.set_priority``, ``POST /jobs/{ref}/priority``, ``fairpod
set-priority``), on a ControlPlane built in-process (real SQLite store, the timed executor, a FAKE clock): a pending
job raised to a higher class is decided again in the next cycle (here: it starts in place of a lower-priority job of
its team), the change is an event and an audit row, and bad requests are refused without changing anything."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.model.jobs import JobState
from fairpod.server.errors import WrongState

from ..inproc import SEED_SPEC, InProc


@pytest.fixture
def h(tmp_path: Path) -> Iterator[InProc]:
    h = InProc(tmp_path, SEED_SPEC)
    yield h
    h.close()


def test_a_waiting_job_raised_to_a_higher_class_starts_next_cycle(h: InProc) -> None:
    for i in range(3):  # john's whole quota (3 nodes), training
        h.submit(f"t{i}", "john", 10_000, priority="training")
    h.submit("smith-0", "smith", 10_000, priority="training")  # smith's node
    h.turn()
    h.submit("late", "john", 10_000, priority="training")
    h.turn()
    assert h.job("late").state == JobState.PENDING
    seq = h.job("late").seq
    job = h.cp.set_priority(h.job("late"), "inference", "ann")
    assert job.spec.priority == "inference" and job.priority == 100 and job.seq == seq  # its place kept
    h.turn()
    h.turn(3)
    assert h.job("late").state == JobState.RUNNING, [(h.job(f"t{i}").state, h.job(f"t{i}").reason) for i in range(3)]
    assert sum(h.job(f"t{i}").state != JobState.RUNNING for i in range(3)) == 1  # one training job gave way
    (ev,) = h.events(h.job("late"), "JobPriorityChanged")
    assert ev.message == "priority class training -> inference by ann"


def test_bad_changes_are_refused_and_change_nothing(h: InProc) -> None:
    h.submit("a", "john", 10_000, priority="training")
    with pytest.raises(ValueError, match="unknown priority class 'urgent' \\(valid: inference, training\\)"):
        h.cp.set_priority(h.job("a"), "urgent", "ann")
    assert h.job("a").spec.priority == "training" and not h.events(h.job("a"), "JobPriorityChanged")
    h.cp.cancel(h.job("a"), "ann")
    h.turn()
    with pytest.raises(WrongState, match="already"):
        h.cp.set_priority(h.job("a"), "inference", "ann")


def test_the_api_route_with_its_rights(tmp_path: Path) -> None:
    from ..inproc_api import Api

    api = Api(tmp_path)
    try:
        api.submit(token=api.member, name="w", team="john", command=["sleep", "600"], priority="training")
        for token, status in ((api.other, 403), (api.viewer, 403)):  # smith's member, a viewer: not theirs
            r = api.api("POST", "/jobs/w/priority", token, json={"priority_class": "inference"})
            assert r.status_code in (status, 404), r.text
        r = api.api("POST", "/jobs/w/priority", api.member, json={"priority_class": "urgent"})
        assert r.status_code == 422 and "priority_class: unknown priority class 'urgent'" in r.json()["detail"]
        r = api.api("POST", "/jobs/w/priority", api.member, json={"priority_class": "x" * 41})
        assert r.status_code == 422
        r = api.api("POST", "/jobs/w/priority", api.member, json={"priority_class": "inference"})
        assert r.status_code == 200 and r.json()["priority"] == "inference", r.text
        assert api.job("w")["priority"] == "inference"
        assert any(e["kind"] == "JobPriorityChanged" for e in api.api("GET", "/jobs/w/events").json()["events"])
    finally:
        api.close()
