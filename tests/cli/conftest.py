"""The CLI end to end: a real fairpod server (tests/server's ``Server``) and ``fairpod`` run as a process."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..server.conftest import SEED_SPEC, Server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path, SEED_SPEC)
    s.start()
    yield s
    s.kill(signal.SIGTERM)
    s.kill_replicas()
