"""Topology-aware placement end to end: a real server, real replicas that record the node they run on, the CLI.

Two racks: r0 with 3 nodes, r1 with 2. A 2-node job that requires one rack gets r1 (the smallest rack it fits,
leaving r0 whole; by node name alone it would take r0-0 and r0-1); a 4-node one waits with the reason; a
3-node one of a team entitled to it reclaims exactly the borrower's jobs in r0.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import Server, running, wait_for

SPEC = """
cluster:
  name: racks
  topology_levels: [rack]
  instance_groups:
    - {name: r0, instance_type: unit1, count: 3, topology: {rack: r0}}
    - {name: r1, instance_type: unit1, count: 2, topology: {rack: r1}}
instance_types:
  - {name: unit1, accelerators: 1, vcpu: 2, memory_gib: 4}
policy:
  idle_compute_allocation: FairShare
teams:
  - {name: a, quota: [{instance_type: unit1, count: 3}]}
  - {name: b, sharing: {strategy: LendAndBorrow, borrow_limit: 500}, quota: [{instance_type: unit1, count: 2}]}
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, SPEC)


def start(server: Server, tmp: Path, name: str, team: str, nodes: int, *flags: str) -> None:
    out = tmp / f"{name}.nodes"
    server.cli("start-job", "--name", name, "--team", team, "--node-count", str(nodes), "--grace-seconds", "1",
               *flags, "--", "sh", "-c", f'echo "$FAIRPOD_NODE" >> {out}; exec sleep 120')


def ran_on(tmp: Path, name: str, n: int) -> set[str]:
    """The nodes the job's replicas reported from inside (each appends its FAIRPOD_NODE)."""
    f = tmp / f"{name}.nodes"
    return wait_for(lambda: f.exists() and len(lines := f.read_text().split()) >= n and set(lines), 20,
                    f"{n} replicas of {name} to report")


def test_required_rack_best_fit_wait_reason_and_reclaim_in_one_rack(server: Server, tmp_path: Path):
    start(server, tmp_path, "two", "a", 2, "--required-topology", "rack")
    server.wait_state("two", "Running")
    assert ran_on(tmp_path, "two", 2) == {"r1-0", "r1-1"}  # the smaller rack: r0 stays whole
    out = server.cli("get-job", "two").stdout
    assert "Topology:        requires one rack; placed in rack r1" in out, out
    assert server.job("two")["topology"] == {"required": "rack", "preferred": None, "placed": {"rack": ["r1"]}}

    start(server, tmp_path, "four", "a", 4, "--required-topology", "rack")
    wait_for(lambda: "in one rack" in server.job("four")["reason"], 20, "four's wait reason")
    assert server.job("four")["reason"] == "needs 4 healthy unit1 nodes in one rack; the largest rack has 3 (rack r0)"
    bad = server.cli("start-job", "--name", "x", "--team", "a", "--required-topology", "row", "--", "true",
                     check=False)
    assert bad.returncode != 0 and "no topology level 'row'" in bad.stderr and "Traceback" not in bad.stderr
    server.cli("cancel-job", "four")
    server.cli("cancel-job", "two")
    server.wait_state("two", "Cancelled")

    for i in range(5):  # b fills both racks, borrowing a's idle quota
        start(server, tmp_path, f"b{i}", "b", 1)
    where = {f"b{i}": next(iter(ran_on(tmp_path, f"b{i}", 1))) for i in range(5)}
    assert sorted(where.values()) == ["r0-0", "r0-1", "r0-2", "r1-0", "r1-1"]

    start(server, tmp_path, "three", "a", 3, "--required-topology", "rack")
    server.wait_state("three", "Running", timeout=60)
    assert ran_on(tmp_path, "three", 3) == {"r0-0", "r0-1", "r0-2"}
    preempted = {j for j, node in where.items() if server.job(j)["preemptions"] == 1}
    assert preempted == {j for j, node in where.items() if node.startswith("r0-")}  # those in r0, no more
    for j, node in where.items():
        if node.startswith("r1-"):
            assert server.job(j)["state"] == "Running"
    listing = server.cli("node", "list").stdout
    assert "TOPOLOGY" in listing and "rack=r1" in listing.splitlines()[-1], listing
    nodes = {n["name"]: n for n in server.api("GET", "/nodes").json()["nodes"]}
    assert nodes["r1-0"]["topology"] == {"rack": "r1"} and nodes["r0-1"]["topology"] == {"rack": "r0"}

    # the other forms of the flags: a preferred level, a level given as Kueue's node label
    start(server, tmp_path, "pref", "b", 1, "--preferred-topology", "rack")
    start(server, tmp_path, "lbl", "b", 1, "--required-topology", "cloud.provider.com/topology-rack")
    assert server.job("pref")["topology"]["preferred"] == "rack"
    assert server.job("lbl")["topology"]["required"] == "rack"
