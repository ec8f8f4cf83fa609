"""Estimated start times, end to end: `fairpod start-job --expected-duration`, `get-job`, `list-jobs` and the
dashboard's task list against a real server running real processes (seed cluster: 4 nodes of 4 GPUs)."""

from __future__ import annotations

import json
import statistics
import time

from ..conftest import Server, wait_for

FOUR = ["--team", "john", "--node-count", "4"]  # every node of the cluster: john's jobs run one at a time


def _get(server: Server, name: str) -> dict:
    return json.loads(server.cli("get-job", name, "--team", "john", "-o", "json").stdout)


def _estimate(server: Server, name: str) -> float | None:
    return _get(server, name)["estimated_start"]


def test_estimated_start_from_declared_and_typical_durations(server: Server):
    # u declares no duration and no job of its shape has finished yet: what waits behind it has no estimate
    server.cli("start-job", "--name", "u", *FOUR, "--", "sleep", "10")
    server.cli("start-job", "--name", "a", *FOUR, "--expected-duration", "8", "--", "sleep", "8")
    server.wait_state("u", "Running")
    u_start = wait_for(lambda: server.job("u")["started_at"], 10, "u to start")
    a = _get(server, "a")
    assert a["state"] == "Pending" and a["expected_duration_seconds"] == 8
    # the estimates are refreshed every 5 s: two refreshes have seen u running and a waiting
    wait_for(lambda: server.job("u")["state"] != "Running" or time.time() - u_start > 7, 12, "7 s")
    if server.job("a")["state"] == "Pending":
        assert _estimate(server, "a") is None
        assert "Estimated start: -" in server.cli("get-job", "a", "--team", "john").stdout

    # a, b declare their durations: c starts when both have run theirs
    server.cli("start-job", "--name", "b", *FOUR, "--expected-duration", "3", "--", "sleep", "3")
    server.cli("start-job", "--name", "c", *FOUR, "--", "sleep", "8")
    a = server.wait_state("a", "Running", 20)
    a_start = wait_for(lambda: server.job("a")["started_at"], 10, "a's start")
    b_est = wait_for(lambda: _estimate(server, "b"), 12, "b's estimate")
    c_est = wait_for(lambda: _estimate(server, "c"), 12, "c's estimate")
    assert abs(b_est - (a_start + 8)) < 1.5, (b_est, a_start)
    assert abs(c_est - (a_start + 8 + 3)) < 1.5, (c_est, a_start)
    text = server.cli("get-job", "b", "--team", "john").stdout
    assert "Estimated start:" in text and "(an estimate" in text and "Queue position:  1" in text
    rows = server.cli("list-jobs", "--team", "john").stdout.splitlines()
    assert "EST. START" in rows[0]
    assert [r for r in rows if " b " in r and "Pending" in r and "~in " in r], rows
    assert [r for r in rows if " a " in r and "Running" in r and "~" not in r], rows  # only pending jobs have one
    tasks = server.api("GET", "/dashboard/tasks", params={"team": "john"}).json()["tasks"]
    dash = {t["name"]: t for t in tasks}
    assert dash["c"]["estimated_start"] is not None and dash["a"]["estimated_start"] is None
    assert abs(dash["c"]["estimated_start"] - c_est) < 6  # a later refresh may have moved it a little

    # no declared duration, but john's finished jobs of this shape ran ~10, 8, 3, 8 s: e is taken to run ~8 s
    server.wait_state("c", "Succeeded", 60)
    done = [server.job(n) for n in ("u", "a", "b", "c")]
    typical = statistics.median(j["finished_at"] - j["started_at"] for j in done)
    server.cli("start-job", "--name", "e", *FOUR, "--", "sleep", "60")
    server.cli("start-job", "--name", "f", *FOUR, "--expected-duration", "1", "--", "true")
    server.wait_state("e", "Running", 20)
    e_start = wait_for(lambda: server.job("e")["started_at"], 10, "e's start")
    f_est = wait_for(lambda: _estimate(server, "f"), 12, "f's estimate")
    assert abs(f_est - (e_start + typical)) < 1.5, (f_est, e_start, typical)
    server.cli("cancel-job", "f", "--team", "john")
    server.cli("cancel-job", "e", "--team", "john")
    server.wait_state("e", "Cancelled", 60)


def test_estimates_in_process_refresh_only_on_change_and_remember_typical_durations(tmp_path):
    """A control plane in process (real SQLite store, the timed executor, a FAKE clock)."""
    from fairpod.server.runtime.wiring import control_plane

    from ..inproc import InProc

    ip = InProc(tmp_path)
    eta = ip.cp.eta
    eta.every = 0.0
    eta.lock_share = float("inf")  # no spacing for the copy's time under the lock (tested below)
    t0 = ip.clock.now
    ip.submit("a", "john", 100, nodes=4)  # no declared duration, no history: unknown
    ip.turn()
    ip.submit("b", "john", 50, nodes=4, expected_duration_seconds=50)
    assert eta.due(ip.cp)
    eta.refresh(ip.cp)
    b = ip.job("b")
    assert eta.get(b) is None and eta.starts == {b.id: None} and eta.refreshes == 1
    assert not eta.due(ip.cp)  # nothing changed
    ip.clock.advance(100)
    ip.turn(2)  # a ends (it ran 100 s), b starts
    assert ip.job("a").state.value == "Succeeded" and ip.job("b").state.value == "Running"
    ip.submit("c", "john", 10, nodes=4)
    assert eta.due(ip.cp)
    eta.refresh(ip.cp)
    assert eta.get(ip.job("c")) == t0 + 100 + 50
    ip.clock.advance(50)
    ip.turn(2)  # b ends, c starts (no declared duration; john's jobs of this shape ran 100 and 50 s)
    ip.cp.stop()
    # a new control plane over the same store learns the typical durations from the succeeded jobs
    ip.cp = control_plane(ip.store, ip.executor, tmp_path, clock=ip.clock)
    ip.submit("d", "john", 10, nodes=4, expected_duration_seconds=10)
    ip.cp.eta.refresh(ip.cp)
    c = ip.job("c")
    assert c.state.value == "Running" and ip.cp.eta.get(ip.job("d")) == c.started_at + 75  # median of 100, 50
    ip.close()


def test_a_copy_that_held_the_lock_long_spaces_the_next_refresh(tmp_path):
    """The copy under the lock takes at most ``lock_share`` of the time: after a 50 ms copy, not for 10 s."""
    import time

    from ..inproc import InProc

    ip = InProc(tmp_path)
    eta = ip.cp.eta
    eta.every, eta.max_age = 0.0, 1.0
    ip.submit("a", "john", 100, nodes=4)
    ip.submit("b", "john", 100, nodes=4)
    eta.refresh(ip.cp)
    eta.copy_seconds = 0.05  # as if the snapshot had been long to copy
    eta._last = time.monotonic() - 9.0  # older than max_age: due but for the copy's time
    assert not eta.due(ip.cp)
    eta._last = time.monotonic() - 10.5
    assert eta.due(ip.cp)
    eta.copy_seconds = 0.001
    eta._last = time.monotonic() - 1.5
    assert eta.due(ip.cp)  # a short copy: max_age decides
    ip.close()


def test_a_job_has_an_estimate_from_submit_on_and_held_array_tasks_have_one(server: Server):
    server.cli("start-job", "--name", "big", *FOUR, "--expected-duration", "30", "--", "sleep", "30")
    server.wait_state("big", "Running")
    big_start = wait_for(lambda: server.job("big")["started_at"], 10, "big's start")
    server.cli("start-job", "--name", "next", *FOUR, "--expected-duration", "5", "--", "true")
    est = _estimate(server, "next")  # at once, not after the next periodic refresh
    assert est is not None and abs(est - (big_start + 30)) < 1.5, (est, big_start)
    assert "~in " in next(r for r in server.cli("list-jobs").stdout.splitlines() if " next " in r)
    server.cli("cancel-job", "next")
    server.cli("cancel-job", "big")
    server.wait_state("big", "Cancelled", 40)
    # a throttled array: one task at a time, 20 s each; the held tasks start one after another
    server.cli("start-job", "--name", "sw", "--team", "john", "--accelerators", "1", "--array", "0-3%1",
               "--expected-duration", "20", "--", "sleep", "20")
    server.wait_state("sw-0", "Running")
    t0 = wait_for(lambda: server.job("sw-0")["started_at"], 10, "sw-0's start")
    for i in (1, 2, 3):
        held = _get(server, f"sw-{i}")
        assert "at most 1 tasks at a time" in held["reason"]
        assert held["estimated_start"] is not None and abs(held["estimated_start"] - (t0 + 20 * i)) < 1.5, (
            i, held["estimated_start"], t0)
    server.cli("cancel-job", "sw")
