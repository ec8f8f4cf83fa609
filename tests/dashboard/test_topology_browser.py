"""The dashboard's node table shows each node's topology (headless Chromium against a real server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..server.conftest import Server, running
from ..server.core.test_topology_live import SPEC
from .test_browser import sign_in


@pytest.fixture
def racks(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, SPEC)


def test_node_table_shows_topology(racks: Server, browser_context: Any):
    page = browser_context.new_page()
    sign_in(page, racks.url, racks.token)
    page.goto(racks.url + "/#/cluster")
    page.locator("#node-table tbody tr").nth(4).wait_for()
    rows = {r[0]: r[-1] for r in (tr.locator("td").all_inner_texts()
                                  for tr in page.locator("#node-table tbody tr").all())}
    assert rows == {"r0-0": "rack r0", "r0-1": "rack r0", "r0-2": "rack r0", "r1-0": "rack r1", "r1-1": "rack r1"}
