"""The dashboard's task table shows an elastic job's size now and its range (headless Chromium, a real server)."""

from __future__ import annotations

from typing import Any

from ..server.conftest import Server, wait_for
from .test_browser import sign_in


def test_task_table_shows_current_min_and_max_nodes(server: Server, browser_context: Any):
    server.submit(name="smith-el", team="smith", min_nodes=1, max_nodes=2, command=["sleep", "60"],
                  termination_grace_seconds=1)
    wait_for(lambda: server.job("smith-el")["nodes"] == 2, 30, "smith-el at 2 nodes (its quota and 1 borrowed)")
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    sign_in(page, server.url, server.token)
    page.goto(server.url + "/#/tasks")
    cell = page.locator("#task-table tr[data-task=smith-el] td").nth(6)
    cell.wait_for()
    assert cell.inner_text().replace("\u00a0", " ") == "2 × 4 (1–2)"
    assert cell.locator("span.elastic").get_attribute("title") == "elastic: 1 to 2 nodes"
    assert not errors, errors
