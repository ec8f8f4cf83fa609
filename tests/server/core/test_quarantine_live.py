"""Node quarantine on a live server with real processes: no new work on the node, the job on it keeps running
(its PID unchanged), the fault type and reason shown as labels in node list, -o json and the metrics."""

from __future__ import annotations

import json
from pathlib import Path

from ... import httpclient
from ..conftest import Server, wait_for


def child_pid(s: Server, job: dict) -> str:
    (f,) = (s.home / "runs").glob(f"{job['name']}-{job['id']}/0/0/child.pid")
    return f.read_text().split()[0]


def test_a_quarantined_node_keeps_its_job_and_takes_no_new_work(server: Server, tmp_path: Path) -> None:
    s = server
    s.submit(name="stays", team="smith", accelerators=1, termination_grace_seconds=1, command=["sleep", "120"])
    job = s.wait_state("stays", "Running", 30)
    node = job["placement"][0]
    pid = wait_for(lambda: list((s.home / "runs").glob("stays-*/0/0/child.pid")) and child_pid(s, job), 30,
                   "stays' process")
    out = s.cli("node", "quarantine", node, "--fault-type", "NvidiaXid", "--reason", "xid 79 twice in an hour")
    assert f"node {node}: quarantined (NvidiaXid: xid 79 twice in an hour); its jobs keep running" in out.stdout
    for i in range(3):  # three whole-node jobs fill the other nodes
        s.submit(name=f"whole{i}", team="john", termination_grace_seconds=1, command=["sleep", "120"])
    for i in range(3):
        assert node not in s.wait_state(f"whole{i}", "Running", 30)["placement"]
    # then smith's small job (submitted with them, a turn could see it waiting first and keep smith's idle node for
    # it instead of lending it to john's third job: a decision, not the quarantine's)
    s.submit(name="small", team="smith", accelerators=1, termination_grace_seconds=1, command=["sleep", "120"])
    cycles = httpclient.get(s.url + "/healthz").json()["cycles"]
    wait_for(lambda: httpclient.get(s.url + "/healthz").json()["cycles"] > cycles + 8, 30, "eight more engine cycles")
    assert s.job("small")["state"] == "Pending"  # only the quarantined node has room for it
    assert s.job("stays")["state"] == "Running" and child_pid(s, job) == pid  # the job on it kept running
    (nd,) = [n for n in json.loads(s.cli("node", "list", "-o", "json").stdout) if n["name"] == node]
    assert nd["health_status"] == "UnschedulableQuarantined" and not nd["schedulable"] and nd["jobs"] == [job["id"]]
    assert nd["status_labels"] == {"fairpod.io/node-health-status": "UnschedulableQuarantined",
                                   "fairpod.io/fault-type": "NvidiaXid",
                                   "fairpod.io/fault-reason": "xid 79 twice in an hour"}
    table = s.cli("node", "list").stdout
    assert "FAULT" in table and "UnschedulableQuarantined" in table and "NvidiaXid: xid 79 twice in an hour" in table
    metrics = httpclient.get(s.url + "/metrics", headers={"Authorization": f"Bearer {s.token}"}).text
    assert (f'fairpod_node_status{{fault_reason="xid 79 twice in an hour",fault_type="NvidiaXid",'
            f'health_status="UnschedulableQuarantined",instance_group="workers",node="{node}"}} 1.0') in metrics
    s.cli("node", "unquarantine", node)
    assert s.wait_state("small", "Running", 30)["placement"] == [node]
    assert s.job("stays")["state"] == "Running" and child_pid(s, job) == pid
    kinds = [e["kind"] for e in s.api("GET", f"/events?node={node}").json().get("events", [])]
    assert "NodeQuarantined" in kinds and "NodeReleased" in kinds
    for name in ("stays", "small", "whole0", "whole1", "whole2"):
        s.api("POST", f"/jobs/{name}/cancel")
