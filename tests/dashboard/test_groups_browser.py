"""The dashboard's Teams page rolls usage up by group (headless Chromium against a real server on the seed cluster
with a two-level tree)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..server.conftest import Server, running
from ..server.test_groups_live import start, tree_spec
from .test_browser import sign_in


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, tree_spec())


def test_teams_page_shows_the_tree_of_groups(tree: Server, browser_context: Any):
    start(tree, "s-own", "smith", 4)
    start(tree, "s-two", "smith", 2)
    tree.wait_state("s-two", "Running")
    page = browser_context.new_page()
    sign_in(page, tree.url, tree.token)
    page.goto(tree.url + "/#/teams")
    page.locator("#tree-table tbody tr").nth(2).wait_for()
    rows = [tr.locator("td").all_inner_texts() for tr in page.locator("#tree-table tbody tr").all()]
    assert [r[0] for r in rows] == ["lab", "research", "ops"]
    ops = rows[2]
    assert ops[2:5] == ["4", "6", "2"] and ops[-1] == "smith" and "borrow limit 50 %" in ops[6], ops
