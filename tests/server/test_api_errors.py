"""Errors of the API that are no fault of the caller, in-process (``api``: the app that ``fairpod up`` builds, on
TestClient, over a real SQLite file whose writes the test makes fail)."""

from __future__ import annotations

from .api import Api


def test_a_write_the_database_refuses_answers_500_and_changes_nothing(api: Api):
    api.submit(name="a", team="john", command=["sleep", "600"])
    api.turn()
    disk_full = api.fail_writes()
    r = api.api("POST", "/jobs/a/cancel")
    assert r.status_code == 500 and "Traceback" not in r.text and "disk" not in r.text, r.text  # no internals
    r = api.api("POST", "/jobs", json={"name": "b", "team": "john", "command": ["true"]})
    assert r.status_code == 500, r.text
    disk_full()
    assert api.job("a")["state"] == "Running" and [j["name"] for j in api.api("GET", "/jobs").json()["jobs"]] == ["a"]
    assert api.api("POST", "/jobs/a/cancel").status_code == 200
    api.turn()
    assert api.job("a")["state"] == "Cancelled"
