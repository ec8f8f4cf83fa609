"""Team RBAC: members see and touch only their teams' jobs; viewers read; only admins change the cluster."""

from __future__ import annotations

import sqlite3

from .conftest import Server


def _user(server: Server, name: str, role: str, teams: list[str]) -> str:
    r = server.api("POST", "/users", json={"name": name, "role": role, "teams": teams})
    assert r.status_code == 201, r.text
    return r.json()["token"]


def test_member_cannot_see_or_touch_another_teams_jobs(server: Server):
    alice = _user(server, "alice", "member", ["smith"])
    bob = _user(server, "bob", "member", ["john"])
    vera = _user(server, "vera", "viewer", [])
    server.submit(bob, name="secret", team="john", command=["sleep", "30"])
    server.submit(alice, name="mine", team="smith", command=["sleep", "30"])

    # alice (smith) cannot list, get, cancel or read logs of john's job
    r = server.api("GET", "/jobs", alice, params={"team": "john"})
    assert r.status_code == 403 and "not a member of team john" in r.json()["detail"]
    assert [j["name"] for j in server.api("GET", "/jobs", alice).json()["jobs"]] == ["mine"]
    for method, path in [("GET", "/jobs/secret"), ("POST", "/jobs/secret/cancel"), ("GET", "/jobs/secret/logs"),
                         ("GET", "/jobs/1"), ("GET", "/jobs/1/replicas")]:
        r = server.api(method, path, alice)
        assert r.status_code == 404, (method, path, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
    r = server.api("POST", "/jobs", alice, json={"name": "x", "team": "john", "command": ["true"]})
    assert r.status_code == 403 and "your teams: smith" in r.json()["detail"]
    assert server.job("secret")["state"] in ("Pending", "Running")  # untouched

    # the same through the CLI: a clear one-line error and a non-zero exit
    r = server.cli("cancel-job", "secret", token=alice, check=False)
    assert r.returncode != 0 and "no job 'secret'" in r.stderr and "Traceback" not in r.stderr

    # viewers read but change nothing and read no logs
    assert {j["name"] for j in server.api("GET", "/jobs", vera).json()["jobs"]} == {"secret", "mine"}
    assert server.api("GET", "/jobs/secret/logs", vera).status_code == 403
    assert server.api("POST", "/jobs/secret/cancel", vera).status_code == 403
    # members are not admins
    for method, path, body in [("POST", "/teams", {"name": "new"}), ("PUT", "/policy", {}),
                               ("POST", "/nodes/workers-0/cordon", None), ("GET", "/users", None),
                               ("GET", "/audit", None)]:
        r = server.api(method, path, alice, json=body)
        assert r.status_code == 403, (path, r.text)


def test_tokens_are_required_hashed_and_revocable(server: Server):
    assert server.api("GET", "/jobs", "fp_not-a-token").status_code == 401
    r = httpx_no_auth(server)
    assert r.status_code == 401 and "Authorization: Bearer" in r.json()["detail"]
    tok = _user(server, "carol", "member", ["john"])
    assert server.api("GET", "/jobs", tok).status_code == 200
    assert server.api("POST", "/users/carol/revoke").status_code == 200
    assert server.api("GET", "/jobs", tok).status_code == 401
    db = sqlite3.connect(server.home / "fairpod.db")
    hashes = [row[0] for row in db.execute("select token_hash from tokens")]
    assert tok not in hashes and len(hashes[0]) == 64
    assert tok.encode() not in (server.home / "fairpod.db").read_bytes()
    audit = server.api("GET", "/audit").json()["audit"]
    actions = {(a["actor"], a["action"], a["target"]) for a in audit}
    assert ("admin", "user.create", "carol") in actions and ("admin", "user.revoke", "carol") in actions


def httpx_no_auth(server: Server):
    import httpx

    return httpx.get(server.url + "/api/v1/jobs", timeout=10)


def test_bad_input_leaves_no_partial_state(server: Server):
    before = server.api("GET", "/spec").json()
    bad = {**before, "teams": before["teams"] + [{"name": "Bad Name"}]}
    r = server.api("PUT", "/spec", json=bad)
    assert r.status_code == 422 and "teams[2].name" in r.json()["detail"]
    over = {**before, "teams": before["teams"] + [{"name": "x", "quota": [{"instance_type": "ml.g5.12xlarge",
                                                                          "count": 1}]}]}
    r = server.api("PUT", "/spec", json=over)
    assert r.status_code == 422 and "add up to" in r.json()["detail"]
    assert server.api("GET", "/spec").json() == before
    r = server.api("POST", "/jobs", json={"name": "j", "team": "john", "priority": "urgent", "command": ["true"]})
    assert r.status_code == 400 and "valid: inference, training" in r.json()["detail"]
    r = server.api("POST", "/jobs", json={"name": "j", "team": "john", "nodes": 9, "command": ["true"]})
    assert r.status_code == 400 and "cluster has 4" in r.json()["detail"]
    assert server.api("GET", "/jobs").json()["jobs"] == []
