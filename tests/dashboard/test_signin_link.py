"""`fairpod dashboard`: a one-time sign-in link that a headless browser opens straight into a signed-in page."""

from __future__ import annotations

from typing import Any

from ..server.conftest import Server


def test_a_one_time_link_signs_in_once_and_holds_no_token(server: Server, browser_context: Any):
    r = server.api("POST", "/users", json={"name": "alice", "role": "member", "teams": ["smith"]})
    alice = r.json()["token"]
    link = server.cli("dashboard", token=alice).stdout.strip()
    assert link.startswith(server.url + "/#signin=") and alice not in link and server.token not in link
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(link)
    page.wait_for_selector("#nav", state="visible")
    assert "alice (member of smith)" in page.inner_text("#user")
    assert "signin" not in page.url  # the spent code is off the address bar
    page.goto(server.url + "/#/teams")
    page.locator("#team-table tr[data-team=smith]").wait_for()
    # the same link a second time (a bookmark, a shared screen): refused, with what to do
    page2 = browser_context.new_page()  # another tab
    page2.goto(link)
    page2.wait_for_function("document.querySelector('#login-error').textContent.includes('fairpod dashboard')")
    assert page2.locator("#nav").is_hidden()
    # an expired or made-up code: the same
    r = server.api("POST", "/dashboard/links/redeem", json={"code": "not-a-code"})
    assert r.status_code == 401 and "fairpod dashboard" in r.json()["detail"]
    assert not errors, errors


def test_nodes_in_natural_order_whole_accelerators_and_priority_as_in_the_cli(tmp_path, browser_context: Any):
    import signal

    spec = tmp_path / "spec.yaml"
    spec.write_text("cluster:\n  name: big\n  instance_groups:\n    - {name: pool, instance_type: ml.g5.xlarge, "
                    "count: 12}\nteams:\n  - name: john\n    quota:\n      - {instance_type: ml.g5.xlarge, count: 12}\n")
    server = Server(tmp_path, spec)
    server.start()
    try:
        server.submit(name="plain", team="john", command=["sleep", "60"])
        server.wait_state("plain", "Running")
        page = browser_context.new_page()
        page.goto(server.cli("dashboard").stdout.strip())
        page.wait_for_selector("#nav", state="visible")
        page.goto(server.url + "/#/cluster")
        page.locator("#node-table tbody tr").nth(11).wait_for()
        names = page.locator("#node-table tbody td:first-child").all_inner_texts()
        assert names == [f"pool-{i}" for i in range(12)], names  # pool-2 before pool-10
        page.wait_for_function("document.getElementById('chart-acc').layout !== undefined")
        assert page.evaluate("document.getElementById('chart-acc').layout.yaxis.tickformat") == "d"
        levels = page.evaluate("document.getElementById('chart-acc').data[0].y.filter((y) => y !== null)")
        assert levels and all(float(y).is_integer() for y in levels), levels
        page.goto(server.url + "/#/tasks")
        row = page.locator("#task-table tr[data-task=plain]")
        row.wait_for()
        assert "(none: lowest)" in row.inner_text()  # as get-job shows a job without a class
    finally:
        server.kill(signal.SIGTERM)
        server.kill_replicas()


def test_a_sign_in_holds_for_every_tab_and_a_signed_out_address_shows_only_the_card(server: Server,
                                                                                    browser_context: Any):
    """The sign-in lasted one tab only (sessionStorage), and a page address typed while signed out drew that page
    under the sign-in card."""
    out = browser_context.new_page()
    out.goto(server.url + "/#/teams")
    out.wait_for_selector("#login", state="visible")
    assert out.locator("#page-teams").is_hidden() and out.locator("#nav").is_hidden()
    out.evaluate("new Promise((done) => { addEventListener('hashchange', () => setTimeout(done, 0), {once: true}); "
                 "location.hash = '#/tasks'; })")  # typed into the address bar while signed out; after the app's turn
    assert out.locator("#page-tasks").is_hidden() and out.locator("#login").is_visible()
    page = browser_context.new_page()
    page.goto(server.cli("dashboard").stdout.strip())
    page.wait_for_selector("#nav", state="visible")
    other = browser_context.new_page()  # another tab, no link
    other.goto(server.url + "/#/teams")
    other.wait_for_selector("#nav", state="visible")
    assert other.locator("#page-teams").is_visible() and other.locator("#login").is_hidden()
    page.click("#signout")  # signs out the other tab too
    other.wait_for_selector("#login", state="visible")
    assert other.locator("#page-teams").is_hidden()
