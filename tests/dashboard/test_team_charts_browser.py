"""The teams page's usage charts at many teams (headless Chromium against a real server): a line per team for the
ten using most, the others summed in one line, so a chart of 500 teams stays readable and is drawn in
milliseconds, not seconds (benchmarks/datacenter.py: the page took 3.8 s to show its table at 1,000 nodes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..server.conftest import Server, running
from .test_browser import sign_in

TEAMS = 13
TYPE = "ml.g5.12xlarge"


def spec() -> str:
    return yaml.safe_dump({
        "cluster": {"name": "many", "instance_groups": [{"name": "workers", "instance_type": TYPE, "count": TEAMS}]},
        "teams": [{"name": f"t{i:02d}", "quota": [{"instance_type": TYPE, "count": 1}]} for i in range(1, TEAMS + 1)],
    })


@pytest.fixture
def many(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, spec())


def test_a_chart_draws_the_ten_teams_using_most_and_sums_the_others(many: Server, browser_context: Any):
    using = [f"t{i:02d}" for i in (13, 1, 2, 3, 4, 5, 6, 7, 8, 9)]  # ten teams using: t13 among them
    for i, team in enumerate(using):
        many.cli("start-job", "--name", f"j{i}", "--team", team, "--accelerators", str(1 + (team == "t13")),
                 "--grace-seconds", "1", "--", "sleep", "300")
    for i in range(len(using)):
        many.wait_state(f"j{i}", "Running")
    page = browser_context.new_page()
    sign_in(page, many.url, many.token)
    page.goto(many.url + "/#/teams")
    page.locator("#team-table tbody tr[data-team]").nth(TEAMS - 1).wait_for()
    page.wait_for_selector("#team-charts .main-svg")
    names = page.evaluate("() => document.querySelector('#team-charts .chart').data.map((t) => t.name)")
    # t13 uses 2: first; then the other nine by name; t10, t11 and t12 use none: summed
    assert names[0::2] == [f"{t} in use" for t in (using[0], *sorted(using[1:]))] + ["the other 3 teams in use"]
    assert names[1::2] == [f"{t} quota" for t in (using[0], *sorted(using[1:]))] + ["the other 3 teams quota"]
    title = page.locator("#team-charts .gtitle").first.text_content() or ""
    assert "the 10 teams using most, the other 3 summed" in title, title
