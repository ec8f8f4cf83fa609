"""The dashboard's Teams page rolls usage up by group (headless Chromium against a real server on the seed cluster
with a two-level tree)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..server.conftest import Server, running
from ..server.core.test_groups_live import start, tree_spec
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


def test_teams_page_explains_why_one_team_gets_more(tree: Server, browser_context: Any):
    for i in range(3):
        start(tree, f"j{i}", "john", 4)
    start(tree, "s0", "smith", 4)
    for name in ("j0", "j1", "j2", "s0"):
        tree.wait_state(name, "Running")
    start(tree, "s-wait", "smith", 2)
    start(tree, "j-wait", "john", 2)
    page = browser_context.new_page()
    sign_in(page, tree.url, tree.token)
    page.goto(tree.url + "/#/teams")
    page.locator("#why-a option").nth(1).wait_for(state="attached")
    page.select_option("#why-a", "smith")
    page.select_option("#why-b", "john")
    page.click("#why-go")
    page.locator("#why-lines li").first.wait_for()
    lines = page.locator("#why-lines li").all_inner_texts()
    assert lines[0] == "smith and john meet at group lab; there group ops (weight 10) stands against group research " \
                       "(weight 60)", lines
    page.locator("#why-next tbody tr").nth(1).wait_for()
    order = [tr.locator("td").nth(1).inner_text() for tr in page.locator("#why-next tbody tr").all()]
    assert order == ["john", "smith"]
