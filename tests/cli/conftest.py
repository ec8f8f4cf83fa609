"""The CLI end to end: a real fairpod server (tests/server's ``Server``) and ``fairpod`` run as a process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..server.conftest import Server, running


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path)
