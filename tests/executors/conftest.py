"""Fixtures for executor tests: a fresh root per test; whatever is left running is killed by PID."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.executors import LocalExecutor

from .. import reaper
from .helpers import kill_recorded, wait_for


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    r = tmp_path / "runs"
    reaper.runs(r)
    yield r
    kill_recorded(r)


@pytest.fixture
def ex(root: Path) -> Iterator[LocalExecutor]:
    e = LocalExecutor(root)
    yield e
    if not e._lock.closed:
        for jname, attempt in e.running().items():
            e.stop(jname, attempt, 0.0)
        try:
            wait_for(lambda: not e.running(), 5.0)
        finally:
            e.close()
