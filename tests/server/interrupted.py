"""What tests/server/test_interrupted_run.py runs in a child pytest and interrupts: a real ``fairpod up`` with a replica
running, and a one-node Ray cluster. Each test says it is up by writing a file into ``$FAIRPOD_TEST_READY_DIR``, then
waits to be interrupted. The suite never collects this file (its name does not start with ``test_``)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.executors import state

from .conftest import Server, wait_for


def _ready(what: str) -> None:
    (Path(os.environ["FAIRPOD_TEST_READY_DIR"]) / what).write_text(str(os.getpid()))
    time.sleep(300)  # the parent interrupts the run long before; bounded, should it not
    pytest.fail("not interrupted within 300 s")


def test_a_server_with_a_replica(server: Server) -> None:
    server.submit(name="held", team="john", command=["sleep", "600"])
    server.wait_state("held", "Running", 60)
    wait_for(lambda: list((server.home / "runs").glob(f"*/*/*/{state.CHILD_PID}")), 30, "the replica's pid file")
    _ready("server")


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A Ray head node, stopped at the module's end as the suite's session cluster is (tests/ray/conftest.py)."""
    pytest.importorskip("ray")
    from ..ray.cluster import RayTestCluster

    cluster = RayTestCluster(tmp_path_factory.mktemp("ray"))
    try:
        cluster.start_head()
        yield
    finally:
        cluster.shutdown()


def test_a_ray_node(ray_head: None) -> None:
    _ready("ray")
