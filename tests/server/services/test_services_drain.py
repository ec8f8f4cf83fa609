"""The beginning of a service replica's drain (``server.services.Services.begin_drain``), in-process: a real SQLite
store, a control plane built for the test (``conftest.cp``), the local executor and real replica processes; the
test calls what the drain thread calls, and the control plane "dies" where its store write raises."""

from __future__ import annotations

import time

import pytest

from fairpod.model.jobs import JobSpec, JobState
from fairpod.model.services import ServiceSpec
from fairpod.server.core import ControlPlane
from fairpod.server.core.transitions.services import Services

from ..faults import fail_writes


class Died(BaseException):
    """The control plane was killed here (not an Exception: nothing in the plane catches it)."""


def test_a_drain_is_shown_only_once_its_sigterm_time_is_kept_for_a_restart(cp: ControlPlane) -> None:
    job = cp.submit(JobSpec(name="chat", team="john", command=["sleep", "300"], nodes=2,
                            service=ServiceSpec(drain_seconds=30)), "tester")
    deadline = time.monotonic() + 30
    while not (cp.runs.get(job.id) and cp.runs[job.id].launched) and time.monotonic() < deadline:
        cp.reconcile_once()
        time.sleep(0.05)
    run = cp.runs[job.id]
    assert cp.store.get_job(job.id).state == JobState.RUNNING and run.launched
    run.removing["1"] = run.nodes[1]  # a shrink removes rank 1 (as control.resize keeps it)
    services = Services(cp)  # its threads are not started: the test does what the drain thread does
    # the control plane dies while it stores rank 1's SIGTERM time: get-service never said "draining"
    heal = fail_writes(cp.store.engine, lambda: True, Died)
    with pytest.raises(Died):
        services.begin_drain(job.id, "chat", 1, None, 30)
    assert services.draining(job.id) == []
    assert not (cp.store.get_job(job.id).run_state or {}).get("drain_until")
    heal()
    # once it is shown, a restarted control plane finds when its SIGTERM is due
    before = cp.clock()
    due = services.begin_drain(job.id, "chat", 1, None, 30)
    assert before + 30 <= due <= cp.clock() + 30 and services.draining(job.id) == [1]
    assert cp.store.get_job(job.id).run_state["drain_until"] == {"1": due}
    # a drain begun before a restart keeps its time and stores nothing again
    fail_writes(cp.store.engine, lambda: True, Died)
    assert services.begin_drain(job.id, "chat", 1, due, 30) == due
