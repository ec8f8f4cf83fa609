"""The in-process control plane of the services' tests: a real SQLite store with the four-node example spec, the
local executor (real replica processes), nothing started; what the test started is stopped after it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fairpod.executors.local import LocalExecutor
from fairpod.model.spec import parse_spec
from fairpod.server.core import ControlPlane
from fairpod.server.nodes import sync_nodes
from fairpod.server.runs import job_key
from fairpod.server.runtime.wiring import control_plane
from fairpod.store import Store

SPEC = (Path(__file__).resolve().parents[3] / "examples" / "four" / "spec.yaml").read_text()  # 4 x unit1


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
