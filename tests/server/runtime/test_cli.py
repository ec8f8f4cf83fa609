"""The CLI end to end: fairpod up (in the background) / down, admin commands, -o json, clear errors."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import yaml

from ..conftest import Server, wait_for


def test_up_admin_commands_and_down(tmp_path: Path):
    s = Server(tmp_path)
    r = s.cli("up", "--port", str(s.port))
    assert "fairpod is up" in r.stdout and f"http://127.0.0.1:{s.port}/" in r.stdout
    cfg = Path(s.env["FAIRPOD_CONFIG"])
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o600 and json.loads(cfg.read_text())["token"].startswith("fp_")
    pid = int((s.home / "server.pid").read_text().split()[0])
    try:
        assert "already running" in s.cli("up", "--port", str(s.port)).stdout
        s.cli("team", "create", "research", "--weight", "20", "--strategy", "Lend")
        s.cli("team", "update", "research", "--weight", "50")
        teams = {t["name"]: t for t in json.loads(s.cli("team", "list", "-o", "json").stdout)}
        assert teams["research"]["fair_share_weight"] == 50 and teams["research"]["sharing"]["strategy"] == "Lend"
        r = s.cli("team", "create", "huge", "--quota", "ml.g5.12xlarge=1", check=False)
        assert r.returncode == 1 and "add up to" in r.stderr and "Traceback" not in r.stderr
        s.cli("policy", "set", "--task-prioritization", "TaskRanking", "--priority-class", "high=90",
              "--priority-class", "low=10")
        pol = json.loads(s.cli("policy", "show", "-o", "json").stdout)
        assert pol["task_prioritization"] == "TaskRanking" and [c["name"] for c in pol["priority_classes"]] == [
            "high", "low"]
        assert pol["preemption_cost_wait_seconds"] == 900  # the default: a costly reclaim waits 15 min at most
        s.cli("policy", "set", "--preemption-cost-wait-seconds", "0")
        pol = json.loads(s.cli("policy", "show", "-o", "json").stdout)
        assert pol["preemption_cost_wait_seconds"] == 0
        r = s.cli("policy", "set", "--preemption-cost-wait-seconds", "-5", check=False)
        assert r.returncode == 1 and "--preemption-cost-wait-seconds" in r.stderr and "Traceback" not in r.stderr
        r = s.cli("policy", "set", "--preempt-to-borrow", "LowerPriority", check=False)  # under FairShare: refused
        assert r.returncode == 1 and "--preempt-to-borrow" in r.stderr and "FirstComeFirstServe" in r.stderr
        s.cli("policy", "set", "--idle-compute-allocation", "FirstComeFirstServe", "--preempt-to-borrow",
              "LowerPriority", "--preempt-to-borrow-max-priority", "-1")
        pol = json.loads(s.cli("policy", "show", "-o", "json").stdout)
        assert (pol["preempt_to_borrow"], pol["preempt_to_borrow_max_priority"]) == ("LowerPriority", -1)
        r = s.cli("policy", "set", "--preempt-to-borrow-max-priority", "high", check=False)
        assert r.returncode == 1 and "--preempt-to-borrow-max-priority wants a whole number" in r.stderr
        s.cli("policy", "set", "--preempt-to-borrow", "Never", "--idle-compute-allocation", "FairShare",
              "--preempt-to-borrow-max-priority", "none")
        s.cli("node", "cordon", "workers-3")
        nodes = {n["name"]: n for n in json.loads(s.cli("node", "list", "-o", "json").stdout)}
        assert nodes["workers-3"]["cordoned"] and not nodes["workers-3"]["schedulable"]
        cl = json.loads(s.cli("cluster", "show", "-o", "json").stdout)
        assert cl["capacity"]["ml.g5.12xlarge"]["schedulable_accelerators"] == 12
        assert "TEAM" in s.cli("cluster", "show").stdout
        r = s.cli("user", "create", "alice", "--team", "smith")
        token = r.stdout.split("token (shown once): ")[1].strip()
        r = s.cli("start-job", "--name", "x", "--team", "john", "--", "true", token=token, check=False)
        assert r.returncode == 1 and "cannot act for team john" in r.stderr
        r = s.cli("start-job", "--name", "x", "--team", "smith", "-o", "json", "--", "true", token=token)
        assert json.loads(r.stdout)["team"] == "smith"
        # another team's job, through the CLI: as if it did not exist, in one line (RBAC: tests/server/access/test_rbac.py)
        s.cli("start-job", "--name", "johns", "--team", "john", "--", "true")
        r = s.cli("cancel-job", "johns", token=token, check=False)
        assert r.returncode == 1 and "no job 'johns'" in r.stderr and "Traceback" not in r.stderr
        wait_for(lambda: json.loads(s.cli("get-job", "x", "-o", "json").stdout)["state"] == "Succeeded", 20,
                 "job x")
        assert "Succeeded" in s.cli("list-jobs", "--status", "Succeeded").stdout
        # apply is idempotent
        spec = yaml.safe_load(yaml.safe_dump(json.loads(s.cli("team", "list", "-o", "json").stdout)))
        full = {"cluster": {"name": "demo", "instance_groups": [
            {"name": "workers", "instance_type": "ml.g5.12xlarge", "count": 5}]}, "teams": spec,
            "policy": pol}
        f = tmp_path / "spec.yaml"
        f.write_text(yaml.safe_dump(full))
        assert "applied" in s.cli("apply", "-f", str(f)).stdout
        assert "unchanged" in s.cli("apply", "-f", str(f)).stdout
        assert len(json.loads(s.cli("node", "list", "-o", "json").stdout)) == 5
        r = s.cli("get-job", "nope", check=False)
        assert r.returncode == 1 and r.stderr.startswith("fairpod: error: no job 'nope'")
        r = s.cli("start-job", "--team", "john", "--", "true", check=False)
        assert r.returncode == 1 and "--name is required" in r.stderr
    finally:
        r = s.cli("down")
    assert "fairpod stopped" in r.stdout
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 10, "the server to exit")
    # state survives a restart
    s.cli("up", "--port", str(s.port))
    try:
        names = [t["name"] for t in json.loads(s.cli("team", "list", "-o", "json").stdout)]
        assert "research" in names
    finally:
        s.cli("down")


def test_cli_without_a_server_says_so(tmp_path: Path):
    s = Server(tmp_path)  # never started: nothing listens on its free port
    Path(s.env["FAIRPOD_CONFIG"]).write_text(json.dumps({"url": s.url, "token": "fp_none"}))
    r = s.cli("list-jobs", check=False)
    assert r.returncode == 1 and "cannot reach the fairpod server" in r.stderr and "fairpod up" in r.stderr
    assert s.url in r.stderr  # its own config's server, whatever runs on the default port
