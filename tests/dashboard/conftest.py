"""A real fairpod server (from tests/server) and headless Debian Chromium driven by playwright."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..server.conftest import Server, running
from ..server.inproc_api import Api

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    """The app in-process (``tests/server/inproc_api.py``), for what needs no browser and no server process."""
    a = Api(tmp_path)
    yield a
    a.close()


@pytest.fixture
def browser_context() -> Iterator[Any]:
    """A fresh Chromium profile (its own --user-data-dir) at a laptop's window size."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is absent (scripts/test.sh installs Debian's chromium when run as root)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, tempfile.TemporaryDirectory(prefix="fairpod-chromium-") as profile:
        ctx = p.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True,
            viewport={"width": 1440, "height": 900}, timeout=30_000,
        )
        ctx.set_default_timeout(15_000)
        try:
            yield ctx
        finally:
            ctx.close()
