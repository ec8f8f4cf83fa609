"""The seed cluster (4 x ml.g5.12xlarge, teams john and smith) with a two-level tree of groups, end to end: a real
``fairpod up``, real replicas, the CLI. lab -> research (john), lab -> ops (smith, 50 % borrow limit): smith's team
limit (100 %) would let it run 8 GPUs, its group's lets it run 6; ``cluster show`` rolls up by group."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ..conftest import SEED_SPEC, Server, running, wait_for


def tree_spec() -> str:
    doc = yaml.safe_load(SEED_SPEC.read_text())
    doc["groups"] = [{"name": "lab", "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 100}},
                     {"name": "research", "parent": "lab", "fair_share_weight": 60},
                     {"name": "ops", "parent": "lab", "fair_share_weight": 10,
                      "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 50}}]
    for t in doc["teams"]:
        t["group"] = "research" if t["name"] == "john" else "ops"
    return yaml.safe_dump(doc)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, tree_spec())


def start(server: Server, name: str, team: str, acc: int) -> None:
    server.cli("start-job", "--name", name, "--team", team, "--accelerators", str(acc), "--grace-seconds", "1",
               "--", "sleep", "120")


def test_group_borrow_limit_and_the_roll_up_on_the_seed_cluster(server: Server):
    start(server, "s-own", "smith", 4)
    server.wait_state("s-own", "Running")
    start(server, "s-more", "smith", 4)  # the team may (4 + 100 %), its group may not (4 + 50 % = 6)
    j = wait_for(lambda: (j := server.job("s-more"))["reason"].startswith("borrow limit") and j, 20,
                 "s-more to wait for its group's borrow limit")
    assert j["state"] == "Pending"
    assert "group ops (of team smith) uses 4 ml.g5.12xlarge accelerators, the job needs 4, and quota 4 + 50% " \
           "allows 6" in j["reason"], j["reason"]
    start(server, "s-two", "smith", 2)  # 6: within the group's limit, borrowed from its cousin john
    server.wait_state("s-two", "Running")
    assert "borrowing 2 accelerators from john" in server.job("s-two")["reason"]

    view = json.loads(server.cli("cluster", "show", "-o", "json").stdout)
    groups = {g["group"]: g for g in view["groups"]}
    assert groups["ops"] == {**groups["ops"], "parent": "lab", "quota": 4, "in_use": 6, "borrowed": 2,
                             "fair_share_weight": 10, "borrow_limit": 50, "teams": ["smith"]}
    assert groups["lab"]["quota"] == 16 and groups["lab"]["in_use"] == 6 and groups["lab"]["borrowed"] == 0
    assert {t["team"]: t["group"] for t in view["teams"]} == {"john": "research", "smith": "ops"}
    out = server.cli("cluster", "show").stdout
    lines = [ln for ln in out.splitlines() if ln.split()[:1] in (["lab"], ["research"], ["ops"])]
    assert [ln.split()[0] for ln in lines] == ["lab", "research", "ops"], out
    assert any(ln.startswith("  ops ") and "smith" in ln and "50%" in ln for ln in out.splitlines()), out


@pytest.fixture
def with_history(tmp_path: Path) -> Iterator[Server]:
    """The server on a database holding test_reports' history: D1: john uses 96 of its 288 accelerator-hours,
    smith 96 of 96 (48 borrowed)."""
    from ...dashboard.test_reports import record_history

    yield from running(tmp_path, tree_spec(), before_start=record_history)


def test_report_usage_rolls_up_by_group(with_history: Server):
    from ...dashboard.test_reports import D1

    server = with_history
    rep = server.api("GET", "/reports/usage", params={"from": D1, "to": D1}).json()
    groups = {g["group"]: g for g in rep["groups"]}
    assert groups["lab"]["accelerator_hours"] == 192 and groups["lab"]["quota_hours"] == 384
    assert groups["lab"]["teams"] == ["john", "smith"] and groups["lab"]["parent"] is None
    assert groups["ops"] == {**groups["ops"], "parent": "lab", "teams": ["smith"], "borrowed_hours": 48,
                             "utilization": 1.0}
    table = server.cli("report", "usage", "--from", D1, "--to", D1).stdout
    assert "Totals by group" in table and "research" in table, table


def test_a_group_admin_manages_the_teams_below_its_group(server: Server):
    out = server.cli("user", "create", "olga", "--role", "group-admin", "--group", "ops", "-o", "json").stdout
    olga = json.loads(out)["token"]
    smith = server.api("GET", "/teams", olga).json()["teams"]
    assert [t["name"] for t in smith] == ["smith"]  # it sees the teams below its group only
    body = {**smith[0], "fair_share_weight": 42}
    r = server.api("PUT", "/teams/smith", olga, json=body)
    assert r.status_code == 200, r.text
    assert server.api("GET", "/cluster").json()["teams"][1]["fair_share_weight"] == 42
    john = next(t for t in server.api("GET", "/teams").json()["teams"] if t["name"] == "john")
    r = server.api("PUT", "/teams/john", olga, json={**john, "fair_share_weight": 1})
    assert r.status_code == 403 and "manages only the teams below its groups (ops)" in r.json()["detail"]
    r = server.api("PUT", "/teams/smith", olga, json={**body, "group": "research"})  # not out of its tree either
    assert r.status_code == 403
    r = server.api("POST", "/teams", olga, json={"name": "newbie", "group": "ops"})
    assert r.status_code == 201, r.text
    # it acts for the jobs of those teams, as a member would
    server.submit(olga, name="o1", team="smith", nodes=1, command=["sleep", "60"])
    r = server.api("POST", "/jobs", olga, json={"name": "o2", "team": "john", "nodes": 1, "command": ["true"]})
    assert r.status_code == 403
    # the CLI: a team created in its group, then moved out of it, which it may not do
    server.cli("team", "create", "newbie2", "--group", "ops", token=olga)
    assert "newbie2" in server.cli("team", "list", token=olga).stdout
    moved = server.cli("team", "update", "newbie2", "--group", "none", token=olga, check=False)
    assert moved.returncode != 0 and "manages only the teams below its groups (ops)" in moved.stderr, moved.stderr
    bad = server.cli("user", "create", "x", "--role", "group-admin", "--group", "nowhere", check=False)
    assert bad.returncode != 0 and "unknown group(s): nowhere" in bad.stderr


def test_explain_who_gets_the_next_idle_node_and_why_a_job_waits(server: Server):
    for i in range(3):
        start(server, f"j{i}", "john", 4)
    start(server, "s0", "smith", 4)
    for name in ("j0", "j1", "j2", "s0"):
        server.wait_state(name, "Running")  # the cluster is full: 16 of 16
    start(server, "s-wait", "smith", 2)
    start(server, "j-wait", "john", 2)
    wait_for(lambda: server.job("j-wait")["reason"] and server.job("s-wait")["reason"], 20, "both to wait")
    r = json.loads(server.cli("explain", "teams", "smith", "john", "-o", "json").stdout)
    assert r["meet"] == "lab" and r["instance_type"] == "ml.g5.12xlarge"
    smith = r["teams"]["smith"]
    assert [(lv["level"], lv["name"], lv["weight"]) for lv in smith] == [
        ("group", "lab", 1), ("group", "ops", 10), ("team", "smith", 100)]
    assert smith[1]["quota"] == 4 and smith[1]["in_use"] == 4 and smith[1]["siblings"] == ["research"]
    # research (weight 60) before ops (weight 10) although smith's team weight (100) is above john's (0)
    nxt = r["next_idle"]
    assert [o["team"] for o in nxt] == ["john", "smith"] and nxt[0]["job"] == "j-wait"
    assert nxt[1]["rule"].startswith("rule 5 (2b): the lower weighted dominant share after admission at level 2")
    out = server.cli("explain", "teams", "smith", "john").stdout
    assert "smith and john meet at group lab; there group ops (weight 10) stands against group research " \
           "(weight 60)" in out, out
    assert "WHY IN THIS PLACE" in out
    job = json.loads(server.cli("explain", "job", "s-wait", "-o", "json").stdout)
    assert job["state"] == "Pending" and job["queue_position"] == 1 and job["team_head"] is True
    assert [o["team"] for o in job["next_idle"]] == ["john", "smith"]
    text = server.cli("explain", "job", "s-wait").stdout
    assert "job s-wait (team smith): Pending" in text and "Who gets the next idle capacity" in text
    bad = server.cli("explain", "teams", "smith", "nobody", check=False)
    assert bad.returncode != 0 and "no team 'nobody'" in bad.stderr
