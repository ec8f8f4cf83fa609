"""A borrower's reason agrees with ``cluster show`` after a quota cut, and reads as words everywhere."""

from __future__ import annotations

import json

from ..conftest import Server


def test_reason_after_a_quota_cut_agrees_with_cluster_show(server: Server):
    server.submit(name="j1", team="john", nodes=1, command=["sleep", "120"])
    server.wait_state("j1", "Running")
    server.submit(name="s2", team="smith", nodes=2, command=["sleep", "120"])  # 1 node of quota + 1 borrowed
    s2 = server.wait_state("s2", "Running")
    assert s2["reason"] == "admitted, borrowing 4 accelerators from john", s2["reason"]
    events = [e["message"] for e in server.job("s2")["events"]]
    assert not any("from john (4)" in m for m in events), events  # no raw counts where one lender says it all
    tasks = server.api("GET", "/dashboard/tasks", params={"team": "smith"}).json()["tasks"]
    assert next(t for t in tasks if t["name"] == "s2")["reason"] == s2["reason"]

    server.cli("team", "update", "john", "--quota", "ml.g5.12xlarge=1")  # john's idle quota is gone
    smith = next(t for t in json.loads(server.cli("cluster", "show", "-o", "json").stdout)["teams"]
                 if t["team"] == "smith")
    assert smith["borrowed"] == 4 and smith["borrowed_from"] == {"(unallocated)": 4}, smith
    reason = server.job("s2")["reason"]
    assert reason == ("admitted borrowing from john; team smith now borrows 4 accelerators from capacity no "
                      "quota holds (4)"), reason
    tasks = server.api("GET", "/dashboard/tasks", params={"team": "smith"}).json()["tasks"]
    assert next(t for t in tasks if t["name"] == "s2")["reason"] == reason
    out = server.cli("get-job", "s2").stdout
    assert "now borrows 4 accelerators from capacity no quota holds" in out
