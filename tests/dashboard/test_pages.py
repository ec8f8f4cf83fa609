"""The dashboard's pages at datacenter size read one page, not everything: ``/dashboard/tasks`` counts every
unfinished task but lists at most ``limit`` from ``offset`` (in the order it always had), and ``/nodes`` pages by
name with the nodes that have a problem first (in-process API, real SQLite store, timed executor)."""

from __future__ import annotations

from .conftest import Api


def test_the_task_overview_counts_every_unfinished_task_and_lists_one_page(api: Api):
    for i in range(6):  # 4 nodes: 4 run, 2 wait
        api.submit(name=f"j{i}", team="john" if i % 2 else "smith", nodes=1, command=["sleep", "600"])
    api.turn()
    full = api.api("GET", "/dashboard/tasks").json()
    assert full["unfinished_total"] == 6 and len(full["tasks"]) == 6
    assert full["counts"]["Running"] == 4 and full["counts"]["Pending"] == 2
    order = [t["name"] for t in full["tasks"]]

    page = api.api("GET", "/dashboard/tasks", params={"limit": 2, "offset": 3}).json()
    assert [t["name"] for t in page["tasks"]] == order[3:5]
    assert page["unfinished_total"] == 6 and page["counts"] == full["counts"] and page["limit"] == 2
    pending = api.api("GET", "/dashboard/tasks", params={"state": "Pending", "limit": 1}).json()
    assert pending["unfinished_total"] == 2 and [t["state"] for t in pending["tasks"]] == ["Pending"]
    assert api.api("GET", "/dashboard/tasks", params={"limit": -1}).status_code == 422


def test_nodes_page_by_name_with_problems_first(api: Api):
    assert api.api("POST", "/nodes/workers-2/cordon").status_code == 200
    every = api.api("GET", "/nodes").json()
    assert every["total"] == 4 and [n["name"] for n in every["nodes"]] == [f"workers-{i}" for i in range(4)]
    page = api.api("GET", "/nodes", params={"limit": 2, "problems_first": "true"}).json()
    assert page["total"] == 4 and [n["name"] for n in page["nodes"]] == ["workers-2", "workers-0"]
    rest = api.api("GET", "/nodes", params={"limit": 2, "offset": 2, "problems_first": "true"}).json()
    assert [n["name"] for n in rest["nodes"]] == ["workers-1", "workers-3"]
