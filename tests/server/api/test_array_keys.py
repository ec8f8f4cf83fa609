"""A job array's Idempotency-Key: a retry gets the first request's tasks (200, ``Idempotent-Replayed``), also when
the two requests arrive together, and a key used for something else is refused (409), as ``POST /jobs`` does."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from ..inproc_api import Api

BODY = {"job": {"name": "sweep", "team": "john", "command": ["sleep", "1"]}, "array": "0-3%2"}


def test_a_retried_array_with_the_same_key_gets_the_first_tasks(api: Api):
    key = {"Idempotency-Key": "arr-1"}
    first = api.api("POST", "/jobs/array", json=BODY, headers=key)
    assert first.status_code == 201, first.text
    again = api.api("POST", "/jobs/array", json=BODY, headers=key)
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true", again.text
    assert again.json() == first.json()
    assert api.api("GET", "/jobs?limit=0").json()["total"] == 4


def test_two_arrays_sent_together_with_one_key_are_one_array(api: Api):
    """Both requests are inside the route, past anything they read before the core's lock, before either writes
    (a barrier on the door's ``submit_array``): one is answered 201, the other 200 with the same tasks."""
    barrier = threading.Barrier(2, timeout=30)
    door = api.cp.submit_array

    def together(*a: Any, **kw: Any) -> Any:
        barrier.wait()
        return door(*a, **kw)

    api.cp.submit_array = together  # type: ignore[method-assign]
    key = {"Idempotency-Key": "arr-2"}
    with ThreadPoolExecutor(2) as pool:
        answers: list[httpx.Response] = list(pool.map(
            lambda _: api.api("POST", "/jobs/array", json=BODY, headers=key), range(2)))
    assert sorted(r.status_code for r in answers) == [200, 201], [(r.status_code, r.text) for r in answers]
    assert answers[0].json() == answers[1].json()
    assert api.api("GET", "/jobs?limit=0").json()["total"] == 4


def test_a_key_used_for_a_job_or_another_array_is_refused(api: Api):
    key = {"Idempotency-Key": "arr-3"}
    one = api.api("POST", "/jobs", json=BODY["job"] | {"name": "single"}, headers=key)
    assert one.status_code == 201, one.text
    r = api.api("POST", "/jobs/array", json=BODY, headers=key)
    assert r.status_code == 409 and "Idempotency-Key 'arr-3' was used for job john/single" in r.json()["detail"], r.text
    key = {"Idempotency-Key": "arr-4"}
    assert api.api("POST", "/jobs/array", json=BODY, headers=key).status_code == 201
    other = {"job": BODY["job"] | {"name": "other"}, "array": "0-1"}
    r = api.api("POST", "/jobs/array", json=other, headers=key)
    assert r.status_code == 409 and "was used for job array john/sweep" in r.json()["detail"], r.text
    r = api.api("POST", "/jobs", json=BODY["job"] | {"name": "sweep"}, headers=key)
    assert r.status_code == 409 and "Idempotency-Key" in r.json()["detail"], r.text
    assert api.api("GET", "/jobs?limit=0").json()["total"] == 5
