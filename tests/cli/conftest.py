"""The CLI end to end: a real fairpod server (tests/server's ``Server``) and ``fairpod`` run as a process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..server.conftest import Server, running


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path)


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the tests of a module that change nothing on it (each checks that it did not)."""
    yield from running(tmp_path_factory.mktemp("server"))
