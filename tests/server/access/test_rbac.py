"""Team RBAC: members see and touch only their teams' jobs; viewers read; only admins change the cluster.
In-process (``api``: the app that ``fairpod up`` builds, on TestClient, over a real SQLite file); the same
refusal through the CLI and a real server is in ``test_cli.py``."""

from __future__ import annotations

import sqlite3

from ..inproc_api import Api


def test_member_cannot_see_or_touch_another_teams_jobs(api: Api):
    alice = api.user("alice", "member", ["smith"])
    bob = api.user("bob", "member", ["john"])
    vera = api.user("vera", "viewer", [])
    api.submit(bob, name="secret", team="john", command=["sleep", "30"])
    api.submit(alice, name="mine", team="smith", command=["sleep", "30"])
    api.turn()

    # alice (smith) cannot list, get, cancel or read logs of john's job
    r = api.api("GET", "/jobs", alice, params={"team": "john"})
    assert r.status_code == 403 and "not a member of team john" in r.json()["detail"]
    assert [j["name"] for j in api.api("GET", "/jobs", alice).json()["jobs"]] == ["mine"]
    for method, path in [("GET", "/jobs/secret"), ("POST", "/jobs/secret/cancel"), ("GET", "/jobs/secret/logs"),
                         ("GET", "/jobs/1"), ("GET", "/jobs/1/replicas")]:
        r = api.api(method, path, alice)
        assert r.status_code == 404, (method, path, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
    r = api.api("POST", "/jobs", alice, json={"name": "x", "team": "john", "command": ["true"]})
    assert r.status_code == 403 and "your teams: smith" in r.json()["detail"]
    api.turn()
    assert api.job("secret")["state"] == "Running"  # untouched

    # viewers read but change nothing and read no logs
    assert {j["name"] for j in api.api("GET", "/jobs", vera).json()["jobs"]} == {"secret", "mine"}
    assert api.api("GET", "/jobs/secret/logs", vera).status_code == 403
    assert api.api("POST", "/jobs/secret/cancel", vera).status_code == 403
    # members are not admins
    for method, path, body in [("POST", "/teams", {"name": "new"}), ("PUT", "/policy", {}),
                               ("POST", "/nodes/workers-0/cordon", None), ("GET", "/users", None),
                               ("GET", "/audit", None)]:
        r = api.api(method, path, alice, json=body)
        assert r.status_code == 403, (path, r.text)
    assert api.job("secret")["state"] == "Running"


def test_tokens_are_required_hashed_and_revocable(api: Api):
    assert api.api("GET", "/jobs", "fp_not-a-token").status_code == 401
    r = api.api("GET", "/jobs", "")  # no Authorization header at all
    assert r.status_code == 401 and "Authorization: Bearer" in r.json()["detail"]
    tok = api.user("carol", "member", ["john"])
    assert api.api("GET", "/jobs", tok).status_code == 200
    assert api.api("POST", "/users/carol/revoke").status_code == 200
    assert api.api("GET", "/jobs", tok).status_code == 401
    db = sqlite3.connect(api.home / "fairpod.db")
    hashes = [row[0] for row in db.execute("select token_hash from tokens")]
    db.close()
    assert tok not in hashes and all(len(h) == 64 for h in hashes)
    assert tok.encode() not in (api.home / "fairpod.db").read_bytes()
    audit = api.api("GET", "/audit").json()["audit"]
    actions = {(a["actor"], a["action"], a["target"]) for a in audit}
    assert ("admin", "user.create", "carol") in actions and ("admin", "user.revoke", "carol") in actions


def test_bad_input_leaves_no_partial_state(api: Api):
    before = api.api("GET", "/spec").json()
    bad = {**before, "teams": before["teams"] + [{"name": "Bad Name"}]}
    r = api.api("PUT", "/spec", json=bad)
    assert r.status_code == 422 and "teams[2].name" in r.json()["detail"]
    over = {**before, "teams": before["teams"] + [{"name": "x", "quota": [{"instance_type": "ml.g5.12xlarge",
                                                                          "count": 1}]}]}
    r = api.api("PUT", "/spec", json=over)
    assert r.status_code == 422 and "add up to" in r.json()["detail"]
    assert api.api("GET", "/spec").json() == before
    r = api.api("POST", "/jobs", json={"name": "j", "team": "john", "priority": "urgent", "command": ["true"]})
    assert r.status_code == 400 and "valid: inference, training" in r.json()["detail"]
    r = api.api("POST", "/jobs", json={"name": "j", "team": "john", "nodes": 9, "command": ["true"]})
    assert r.status_code == 400 and "cluster has 4" in r.json()["detail"]
    assert api.api("GET", "/jobs").json()["jobs"] == []

