"""The beginning of a service replica's drain (``server.services.Services.begin_drain``), in-process: a real SQLite
store, a control plane built in the test, the local executor and real replica processes; the test calls what
the drain thread calls, and the control plane "dies" where its store write raises."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fairpod.executors.local import LocalExecutor
from fairpod.model.jobs import JobSpec, JobState
from fairpod.model.services import ServiceSpec
from fairpod.model.spec import parse_spec
from fairpod.server.core import ControlPlane
from fairpod.server.core.transitions.services import Services
from fairpod.server.nodes import sync_nodes
from fairpod.server.runs import job_key
from fairpod.server.runtime.wiring import control_plane
from fairpod.store import Store

from ..faults import fail_writes

SPEC = (Path(__file__).resolve().parents[3] / "examples" / "four" / "spec.yaml").read_text()  # 4 x unit1


class Died(BaseException):
    """The control plane was killed here (not an Exception: nothing in the plane catches it)."""


@pytest.fixture
def cp(tmp_path: Path) -> Iterator[ControlPlane]:
    store = Store(f"sqlite:///{tmp_path / 'fairpod.db'}")
    store.create_all()
    cluster = parse_spec(yaml.safe_load(SPEC))
    sync_nodes(store, cluster)
    store.put_spec(cluster)
    executor = LocalExecutor(tmp_path / "runs")
    cp = control_plane(store, executor, tmp_path)
    yield cp
    for job in store.list_jobs(finished=False):
        executor.stop(job_key(job), job.attempt, 0.0)
    executor.close()
    store.close()


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
