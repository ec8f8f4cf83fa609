"""The dashboard end to end: a real server runs the seed scenario; headless Chromium signs in and reads it.

Screenshots of each page go to the test's temporary directory, or to $FAIRPOD_SCREENSHOT_DIR when set
(docs/screenshots holds the ones in the documentation).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..server.conftest import Server, wait_for


def shot(page: Any, tmp_path: Path, name: str) -> None:
    out = Path(os.environ.get("FAIRPOD_SCREENSHOT_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / f"dashboard-{name}.png"), full_page=True)


def sign_in(page: Any, url: str, token: str) -> None:
    page.goto(url + "/")
    page.wait_for_selector("#login-form", state="visible")
    page.fill("#token", token)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#nav", state="visible")


def test_dashboard_shows_the_seed_scenario(server: Server, browser_context: Any, tmp_path: Path):
    server.submit(name="quick", team="john", command=["sleep", "0.5"])  # an attempt that ended: goodput to chart
    server.wait_state("quick", "Succeeded")
    server.submit(name="john-train", team="john", nodes=2, command=["sleep", "120"])
    server.wait_state("john-train", "Running")
    server.submit(name="smith-train", team="smith", nodes=2, priority="training", termination_grace_seconds=2,
                  command=["sleep", "120"], expected_duration_seconds=120)
    server.wait_state("smith-train", "Running")
    server.submit(name="smith-extra", team="smith", nodes=1, command=["sleep", "5"])  # waits: borrow limit
    wait_for(lambda: "borrow limit" in server.job("smith-extra")["reason"], 10, "smith-extra's reason")
    wait_for(lambda: server.job("smith-extra")["estimated_start"], 15, "smith-extra's estimated start")

    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    # a wrong token is refused with a clear message
    page.goto(server.url + "/")
    page.wait_for_selector("#login-form", state="visible")
    shot(page, tmp_path, "login")
    page.fill("#token", "fp_not-a-token")
    page.click("#login-form button[type=submit]")
    page.wait_for_function("document.querySelector('#login-error').textContent.includes('unknown or revoked')")

    sign_in(page, server.url, server.token)
    page.goto(server.url + "/#/teams")
    smith_borrowed = page.locator("#team-table tr[data-team=smith] td.borrowed")
    smith_borrowed.filter(has_text="4 from john").wait_for()
    assert smith_borrowed.inner_text().strip() == "4 from john"
    assert page.locator("#team-table tr[data-team=john] td").nth(5).inner_text() == "4"  # john lends 4
    util = page.locator("#kpi-util-ml-g5-12xlarge .value")
    util.filter(has_text="100 %").wait_for()
    assert util.inner_text().strip() == "100 %"
    page.wait_for_selector("#team-charts .main-svg")  # the chart of usage against quota is drawn
    page.wait_for_selector("#goodput-chart .main-svg")  # and the goodput per team
    assert "john (100 %)" in page.locator("#goodput-chart").inner_text()
    shot(page, tmp_path, "teams")

    page.goto(server.url + "/#/cluster")
    page.locator("#kpi-utilisation .value").filter(has_text="100 %").wait_for()
    assert page.locator("#kpi-acc .value").inner_text().strip() == "16 / 16"
    assert page.locator("#node-table tbody tr").count() == 4
    page.wait_for_selector("#chart-acc .main-svg")
    shot(page, tmp_path, "cluster")

    page.goto(server.url + "/#/tasks")
    row = page.locator("#task-table tr[data-task=smith-extra]")
    row.wait_for()
    cells = row.locator("td").all_inner_texts()
    assert cells[1] == "smith" and "Pending" in cells[3] and cells[4] == "1"
    assert cells[10].startswith("borrow limit reached")
    assert re.fullmatch(r"≈ in (1 min \d+ s|\d+ s)", cells[5]), cells[5]  # when smith-train is expected to end
    assert page.locator("#task-table tr[data-task=smith-train] td").nth(2).inner_text() == "training"
    assert page.locator("#kpi-running .value").inner_text() == "2"
    # filters: by state
    page.select_option("#f-state", "Running")
    page.wait_for_function("document.querySelectorAll('#task-table tbody tr').length === 2")
    page.select_option("#f-state", "")
    # the page updates without a reload: john reclaims its quota, smith's job is preempted
    server.submit(name="john-eval", team="john", nodes=1, command=["sleep", "60"])
    page.locator("#task-table tr[data-task=john-eval]").wait_for()
    # smith-train goes back to its queue (1 preemption); smith-extra gets the node john did not need
    page.locator("#task-table tr[data-task=smith-train] td.preempted").filter(has_text="1 / 0").wait_for(
        timeout=20_000)
    page.locator("#task-table tr[data-task=smith-extra] td.state-cell").filter(
        has_text=re.compile("Running|Succeeded")).wait_for(timeout=20_000)
    shot(page, tmp_path, "tasks")

    page.goto(server.url + "/#/events")
    page.locator("#event-table tr[data-kind=JobPreempted]").first.wait_for(timeout=20_000)
    page.locator("#event-table tr[data-kind=JobAdmitted]").first.wait_for()
    page.select_option("#f-kind", "Preempt,Requeued")
    page.wait_for_function("[...document.querySelectorAll('#event-table tbody tr')].every("
                           "r => /Preempt|Requeued/.test(r.dataset.kind))")
    page.select_option("#f-kind", "")
    # a job's start names the nodes it started on (the Node column said '–')
    started = page.locator("#event-table tr[data-kind=JobStarted]").filter(has_text="john-train").first
    assert re.fullmatch(r"workers-\d, workers-\d", started.locator("td").nth(3).inner_text()), started.inner_text()
    shot(page, tmp_path, "events")
    # the Ended card of a busy day's counts: a count keeps its symbol on its line (at this window's width, 123 ✓
    # 56 ✗ 78 put the last '–' alone on the card's second line)
    def busy(route: Any) -> None:
        body = route.fetch().json()
        body["counts"].update(Succeeded=123, Failed=56, Cancelled=78)
        route.fulfill(json=body)

    page.route("**/api/v1/dashboard/tasks*", busy)
    page.goto(server.url + "/#/tasks")
    page.locator("#task-kpis .kpi").filter(has_text="123").wait_for()
    split = page.evaluate(SYMBOL_ON_ITS_OWN)
    assert split == [], split
    page.unroute("**/api/v1/dashboard/tasks*")
    assert not errors, errors


# the symbols of the Ended card whose line is not their number's: [symbol, its top, the number's top]
SYMBOL_ON_ITS_OWN = """() => {
  const card = [...document.querySelectorAll('#task-kpis .kpi')].find(k => k.querySelector('.label').textContent === 'Ended');
  const chars = [];
  const walk = document.createTreeWalker(card.querySelector('.value'), NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode())
    for (let i = 0; i < n.data.length; i++) chars.push([n, i, n.data[i]]);
  const top = ([n, i]) => { const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
                            return Math.round(r.getBoundingClientRect().top); };
  const out = [];
  chars.forEach((c, k) => {
    if (!'✓✗–'.includes(c[2])) return;
    let j = k - 1;
    while (j >= 0 && !/[0-9]/.test(chars[j][2])) j--;
    if (top(c) !== top(chars[j])) out.push([c[2], top(c), top(chars[j])]);
  });
  return out;
}"""


def test_a_member_sees_only_their_teams(server: Server, browser_context: Any, tmp_path: Path):
    r = server.api("POST", "/users", json={"name": "alice", "role": "member", "teams": ["smith"]})
    assert r.status_code == 201, r.text
    alice = r.json()["token"]
    server.submit(name="john-train", team="john", nodes=1, command=["sleep", "60"])
    server.submit(name="smith-train", team="smith", nodes=1, command=["sleep", "60"])
    server.wait_state("smith-train", "Running")
    page = browser_context.new_page()
    sign_in(page, server.url, alice)
    assert "alice (member of smith)" in page.inner_text("#user")
    page.goto(server.url + "/#/teams")
    page.locator("#team-table tr[data-team=smith]").wait_for()
    assert page.locator("#team-table tbody tr").count() == 1
    page.goto(server.url + "/#/tasks")
    page.locator("#task-table tr[data-task=smith-train]").wait_for()
    assert page.locator("#task-table tr[data-task=john-train]").count() == 0
    assert page.locator("#f-team option").all_inner_texts() == ["all", "smith"]
    page.goto(server.url + "/#/events")
    page.locator("#event-table tr[data-kind=JobAdmitted]").first.wait_for()
    teams = set(page.locator("#event-table tbody td:nth-child(3)").all_inner_texts())
    assert teams <= {"smith", "–"}, teams
    # revoking the token signs the page out on its next update
    assert server.api("POST", "/users/alice/revoke").status_code == 200
    page.wait_for_selector("#login-form", state="visible", timeout=10_000)
    assert "no longer valid" in page.inner_text("#login-error")
