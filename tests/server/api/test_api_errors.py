"""Errors of the API that are no fault of the caller, in-process (``api``: the app that ``fairpod up`` builds, on
TestClient, over a real SQLite file whose writes the test makes fail)."""

from __future__ import annotations

import sqlite3

from ..inproc_api import Api


def test_a_write_the_database_refuses_answers_500_and_changes_nothing(api: Api):
    api.submit(name="a", team="john", command=["sleep", "600"])
    api.turn()
    refused = api.fail_writes(error=sqlite3.OperationalError("attempt to write a readonly database"))
    r = api.api("POST", "/jobs/a/cancel")
    assert r.status_code == 500 and "Traceback" not in r.text and "readonly" not in r.text, r.text  # no internals
    r = api.api("POST", "/jobs", json={"name": "b", "team": "john", "command": ["true"]})
    assert r.status_code == 500, r.text
    refused()
    assert api.job("a")["state"] == "Running" and [j["name"] for j in api.api("GET", "/jobs").json()["jobs"]] == ["a"]
    assert api.api("POST", "/jobs/a/cancel").status_code == 200
    api.turn()
    assert api.job("a")["state"] == "Cancelled"


def test_a_full_disk_answers_503_with_the_reason_and_changes_nothing(api: Api):
    api.submit(name="a", team="john", command=["sleep", "600"])
    api.turn()
    disk_full = api.fail_writes()  # SQLite's "database or disk is full"
    r = api.api("POST", "/jobs", json={"name": "b", "team": "john", "command": ["true"]})
    assert r.status_code == 503 and r.json()["title"] == "disk full" and "Traceback" not in r.text, r.text
    disk_full()
    assert [j["name"] for j in api.api("GET", "/jobs").json()["jobs"]] == ["a"]
