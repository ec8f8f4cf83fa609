"""Policy as code through the CLI: ``apply --dry-run`` shows the diff and what the engine would do, every applied
spec is a version in ``policy history``, and ``policy rollback N`` brings one back."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ..conftest import SEED_SPEC, Server, wait_for


def spec_with(tmp: Path, name: str, change: dict) -> Path:
    data = yaml.safe_load(SEED_SPEC.read_text())
    for t in data["teams"]:
        if t["name"] in change.get("quota", {}):
            t["quota"][0]["count"] = change["quota"][t["name"]]
    data["policy"].update(change.get("policy", {}))
    path = tmp / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_dry_run_history_and_rollback(server: Server, tmp_path: Path):
    s = server
    s.submit(name="john-a", team="john", command=["sleep", "600"])
    s.submit(name="smith-train", team="smith", nodes=2, min_runtime_seconds=3600, command=["sleep", "600"])
    s.wait_state("john-a", "Running")
    s.wait_state("smith-train", "Running")  # borrows one of john's nodes
    s.submit(name="john-b", team="john", nodes=2, command=["sleep", "600"])  # within john's quota, but smith's
    wait_for(lambda: "cannot be preempted yet" in s.job("john-b")["reason"], 20,
             "john-b to wait for smith's minimum runtime")

    # john's quota lowered while smith borrows: the diff, and nothing preempted now
    lower = spec_with(tmp_path, "lower.yaml", {"quota": {"john": 2}})
    r = s.cli("apply", "--dry-run", "-f", str(lower))
    changed = [ln for ln in r.stdout.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert changed == ["-    count: 3", "+    count: 2"], r.stdout
    assert "the engine would preempt and start nothing now" in r.stdout
    assert "dry run: nothing was changed" in r.stdout
    out = json.loads(s.cli("apply", "--dry-run", "-f", str(lower), "-o", "json").stdout)
    assert out["changed"] and not out["problems"]
    assert not [j for j in out["would_preempt"] if j["name"] == "john-a"]

    # without the min-runtime protection the engine would reclaim john's node from smith now
    no_min = spec_with(tmp_path, "nomin.yaml", {"policy": {"max_min_runtime_seconds": 0}})
    out = json.loads(s.cli("apply", "--dry-run", "-f", str(no_min), "-o", "json").stdout)
    assert [(j["team"], j["name"], j["kind"]) for j in out["would_preempt"]] == [("smith", "smith-train", "reclaim")]
    assert [j["name"] for j in out["would_start"]] == ["john-b"]
    text = s.cli("apply", "--dry-run", "-f", str(no_min)).stdout
    assert "would preempt smith/smith-train (reclaim)" in text and "would start john/john-b" in text
    # the dry runs changed nothing
    assert s.job("smith-train")["state"] == "Running" and s.job("john-b")["state"] == "Pending"
    hist = json.loads(s.cli("policy", "history", "-o", "json").stdout)
    assert hist["current"] == 1 and [v["version"] for v in hist["versions"]] == [1]

    # apply, see the history, roll back
    s.cli("apply", "-f", str(lower))
    s.cli("policy", "set", "--starvation-guard-seconds", "120")
    hist = json.loads(s.cli("policy", "history", "-o", "json").stdout)
    assert [(v["version"], v["action"], v["actor"]) for v in hist["versions"]][:2] == [
        (3, "policy.set", "admin"), (2, "spec.apply", "admin")]
    table = s.cli("policy", "history").stdout
    assert "3 *" in table and "policy.set" in table
    shown = s.cli("policy", "history", "1").stdout
    assert "version 1" in shown and "count: 3" in shown
    r = s.cli("policy", "rollback", "1")
    assert "now version 4" in r.stdout
    spec = s.api("GET", "/spec").json()
    spec = spec.get("spec", spec)
    assert next(t for t in spec["teams"] if t["name"] == "john")["quota"][0]["count"] == 3
    assert "unchanged" in s.cli("policy", "rollback", "4").stdout
    bad = s.cli("policy", "rollback", "99", check=False)
    assert bad.returncode == 1 and "not in the history" in bad.stderr
    member = s.cli("user", "create", "mo", "--team", "john").stdout.split("token (shown once): ")[1].strip()
    r = s.cli("apply", "--dry-run", "-f", str(lower), token=member, check=False)
    assert r.returncode == 1 and "admin" in r.stderr
