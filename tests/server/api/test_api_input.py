"""Bad input and overreach answered with 4xx before anything is written; what each role sees of others' jobs; a
retried submit. In-process (``api``: the app that ``fairpod up`` builds, on TestClient, over a real SQLite file);
the live server's own hardening (its pid file, the reclaim that a minimum runtime cannot block, the schema fuzzer)
stays in test_hardening.py."""

from __future__ import annotations

import httpx
import pytest

from ..inproc_api import Api


def raw(api: Api, method: str, path: str, body: bytes | None = None) -> httpx.Response:
    return api.api(method, path, content=body, headers={"Content-Type": "application/json"})


def test_viewers_see_env_keys_only_and_members_see_only_their_jobs_on_nodes(api: Api):
    viewer, sam = api.viewer, api.other  # sam: a member of team smith
    api.submit(name="secretive", team="john", nodes=1, command=["sleep", "60"], env={"API_KEY": "s3cr3t"})
    api.turn()
    job = api.job("secretive")
    assert job["state"] == "Running"
    seen = api.api("GET", "/jobs/secretive", viewer).json()
    assert seen["env"] == {"API_KEY": "(hidden)"} and "s3cr3t" not in str(seen)
    assert api.api("GET", "/jobs/secretive").json()["env"] == {"API_KEY": "s3cr3t"}  # admin
    nodes = api.api("GET", "/nodes", sam).json()["nodes"]
    assert all(job["id"] not in n["jobs"] for n in nodes)
    assert sum(n["other_jobs"] for n in nodes) == 1
    assert any(job["id"] in n["jobs"] for n in api.api("GET", "/nodes").json()["nodes"])
    api.api("POST", "/jobs/secretive/cancel")


@pytest.mark.parametrize("method,path,body", [
    ("GET", "/jobs/99999999999999999999999", None),
    ("GET", "/jobs/%C2%B2", None),
    ("GET", "/jobs/1/events?since_id=99999999999999999999999", None),
    ("GET", "/events?since_id=99999999999999999999999", None),
    ("GET", "/events?limit=-1", None),
    ("GET", "/jobs?offset=99999999999999999999999", None),
    ("GET", "/jobs?limit=99999999999999999999999", None),
    ("POST", "/jobs", b'{"name":"x","team":"john","accelerators":Infinity}'),
    ("POST", "/jobs", b'{"name":"x","team":"john","accelerators":1e308}'),
    ("POST", "/jobs", b'{"name":"x","team":"john","vcpu":1e308}'),
    ("POST", "/jobs", b'{"name":"x","team":"john","command":["\\ud800"]}'),
    ("POST", "/jobs", b'{"name":"x","team":"john","env":{"A":"\\ud800"}}'),
    ("POST", "/jobs", b'{"name":"x","team":"john","env":{"A B":"1"}}'),
    ("POST", "/jobs", b'{"name":"x","team":"john","nodes":true}'),
    ("POST", "/jobs", b'{"name":"x","team":"john",'),
    ("POST", "/jobs", b'\xff\xfe'),
    ("POST", "/jobs/1/progress", b'{"step":99999999999999999999999}'),
    ("DELETE", "/jobs", None),
])
def test_bad_input_is_a_4xx_problem_and_writes_nothing(shared_api: Api, method: str, path: str,
                                                       body: bytes | None):
    api = shared_api  # one app for every case: none may write anything
    r = raw(api, method, path, body)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.headers["content-type"] == "application/problem+json", r.text
    assert r.json()["detail"]
    if r.status_code == 405:
        assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}
    assert api.api("GET", "/jobs").json()["count"] == 0
    assert api.api("GET", "/jobs/1").status_code == 404  # and the server is still fine


def test_oversized_bodies_are_refused_before_they_are_read(api: Api):
    r = raw(api, "POST", "/jobs", b'{"name":"x","team":"john","command":["' + b"a" * (2 * 1024 * 1024) + b'"]}')
    assert r.status_code == 413 and r.headers["content-type"] == "application/problem+json"
    big = {"name": "x", "team": "john", "command": ["a" * 200_000]}
    r = api.api("POST", "/jobs", json=big)
    assert r.status_code == 422 and "at most" in r.json()["detail"]
    assert api.api("GET", "/jobs").json()["count"] == 0


def test_a_retried_submit_with_the_same_idempotency_key_returns_the_first_job(api: Api):
    body = {"name": "once", "team": "john", "command": ["sh", "-c", "echo ran"]}
    key = {"Idempotency-Key": "k-123"}
    first = api.api("POST", "/jobs", json=body, headers=key)
    assert first.status_code == 201, first.text
    api.until("once", "Succeeded")
    again = api.api("POST", "/jobs", json=body, headers=key)  # the retry after a crash, once the job finished
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true", again.text
    assert again.json()["id"] == first.json()["id"] and again.json()["state"] == "Succeeded"
    other = api.api("POST", "/jobs", json={**body, "name": "twice"}, headers=key)
    assert other.status_code == 409 and "Idempotency-Key" in other.json()["detail"]
    assert api.api("GET", "/jobs").json()["total"] == 1
    assert api.api("POST", "/jobs", json=body, headers={"Idempotency-Key": "k-456"}).status_code == 201


def test_expected_duration_must_be_positive(api: Api):
    r = api.api("POST", "/jobs", json={"name": "z", "team": "john", "command": ["true"],
                                       "expected_duration_seconds": -5})
    assert r.status_code == 422 and "expected_duration_seconds" in r.text
    assert api.api("GET", "/jobs").json()["total"] == 0  # the CLI's words for it: tests/cli/test_start_job.py
