"""A service's minimum replicas against its team's quota, through the real CLI and a real server: a minimum that
would need borrowed capacity waits and ``fairpod explain job`` names why; a minimum more than the team's whole
quota (on every instance type it names) is refused at submit.

Three 1-accelerator nodes (unit1) and three 4-accelerator nodes (unit4). Teams john (1 unit1) and smith (2 unit1,
1 unit4) sit in group lab, whose quota is theirs summed (3 unit1).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import Server, running, wait_for

SPEC = """
cluster:
  name: quota
  instance_groups:
    - {name: g, instance_type: unit1, count: 3}
    - {name: h, instance_type: unit4, count: 3}
instance_types:
  - {name: unit1, accelerators: 1, vcpu: 2, memory_gib: 4}
  - {name: unit4, accelerators: 4, vcpu: 8, memory_gib: 16}
groups:
  - {name: lab, sharing: {strategy: LendAndBorrow, borrow_limit: 100}}
teams:
  - {name: john, group: lab, sharing: {strategy: LendAndBorrow, borrow_limit: 100},
     quota: [{instance_type: unit1, count: 1}]}
  - {name: smith, group: lab, sharing: {strategy: LendAndBorrow, borrow_limit: 100},
     quota: [{instance_type: unit1, count: 2}, {instance_type: unit4, count: 1}]}
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, SPEC)


def service(server: Server, name: str, lo: int, *extra: str, check: bool = True):
    return server.cli("start-service", "--name", name, "--team", "smith", "--min-replicas", str(lo), *extra,
                      "--", "sleep", "300", check=check)


def test_explain_names_why_a_services_minimum_waits(server: Server):
    # smith runs a job on one of its two unit1 nodes; a service's minimum of 2 would borrow john's idle node
    server.cli("start-job", "--name", "busy", "--team", "smith", "--instance-type", "unit1", "--grace-seconds",
               "1", "--", "sleep", "300")
    server.wait_state("busy", "Running")
    service(server, "web", 2, "--instance-type", "unit1")
    j = wait_for(lambda: "quota" in (j := server.job("web"))["reason"] and j, 20, "web's reason")
    assert j["state"] == "Pending" and "never on borrowed capacity" in j["reason"], j["reason"]
    r = json.loads(server.cli("explain", "job", "web", "-o", "json").stdout)
    assert r["team_check"] == {"within_quota": False, "may_hold": False, "quota_bound": True,
                               "why_not": j["reason"]}, r
    smith = next(o for o in r["next_idle"] if o["team"] == "smith")
    assert smith["job"] == "web" and smith["may_hold"] is False and smith["why_not"] == j["reason"], smith
    text = server.cli("explain", "job", "web").stdout
    assert f"held back by its team's check: {j['reason']}" in text, text
    assert "never on borrowed capacity" in text.split("Who gets the next idle capacity")[1], text


def test_a_service_whose_minimum_is_beyond_its_teams_whole_quota_is_refused(server: Server):
    # smith's unit1 quota is 2 nodes (its group's is 3: a team's minimum counts against the team's own quota)
    bad = service(server, "big", 3, "--instance-type", "unit1", check=False)
    assert bad.returncode != 0 and bad.stdout == "", (bad.returncode, bad.stdout)
    assert bad.stderr.strip().endswith(
        "--min-replicas 3 needs 3 nodes of unit1; team smith's quota is 2; a service's minimum replicas run only "
        "within its team's quota, never on borrowed capacity, so it could never run"), bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    # a replica smaller than a node: in accelerators
    half = service(server, "half", 3, "--instance-type", "unit4", "--accelerators", "2", check=False)
    assert half.returncode != 0 and "--min-replicas 3 needs 6 unit4 accelerators (3 x 2); team smith's quota is " \
        "4 accelerators" in half.stderr, half.stderr
    # through the API: 422, and nothing stored
    r = server.api("POST", "/jobs", json={"name": "big", "team": "smith", "nodes": 3, "instance_type": "unit1",
                                          "command": ["sleep", "300"], "service": {}})
    assert r.status_code == 422 and "min_nodes 3 needs 3 nodes of unit1; team smith's quota is 2" in r.text, r.text
    assert server.api("GET", "/jobs/big").status_code == 404
    jobs = json.loads(server.cli("list-jobs", "--all-teams", "-o", "json").stdout)
    assert [j for j in (jobs["jobs"] if isinstance(jobs, dict) else jobs) if j["name"] in ("big", "half")] == []
    # a fallback type whose quota holds it: accepted (only a service no type can ever hold is refused)
    ok = service(server, "either", 3, "--instance-type", "unit1,unit4", "--accelerators", "1")
    assert "started" in ok.stdout, ok.stdout
    # within the quota: accepted; a plain job of the same size is not refused (it may borrow)
    service(server, "fits", 2, "--instance-type", "unit1")
    server.cli("start-job", "--name", "wide", "--team", "smith", "--instance-type", "unit1", "--node-count", "3",
               "--", "sleep", "300")
