"""The routes' caller (server.access.auth.principal): a bearer token verified a moment ago is answered in the event
loop, without a worker thread's round trip; everything else goes to the thread as before, with the same answers."""

from __future__ import annotations

from typing import Any

import pytest

import fairpod.server.access.auth as auth

from ..inproc_api import Api


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The functions the caller's dependency handed to a worker thread, in order."""
    out: list[str] = []
    real = auth.run_in_threadpool

    async def counted(fn: Any, *a: Any, **kw: Any) -> Any:
        out.append(fn.__name__)
        return await real(fn, *a, **kw)

    monkeypatch.setattr(auth, "run_in_threadpool", counted)
    return out


def test_a_token_verified_a_moment_ago_is_answered_without_a_thread(api: Api, hops: list[str]) -> None:
    tok = api.user("nia", "member", ["john"])  # never used yet
    hops.clear()  # (the admin's request that made it)
    r = api.api("GET", "/jobs", tok)
    assert r.status_code == 200 and hops == ["current_principal"]  # the database read: in a thread
    for path in ("/jobs", "/cluster", "/jobs?team=john"):
        assert api.api("GET", path, tok).status_code == 200
    assert hops == ["current_principal"]  # then from memory, in the loop
    # the same principal either way: a member of john sees john's jobs and is refused smith's
    assert api.api("GET", "/jobs?team=smith", tok).status_code == 403
    assert hops == ["current_principal"]


def test_what_memory_cannot_answer_goes_to_the_thread_with_the_same_answers(api: Api, hops: list[str]) -> None:
    tok = api.user("nia", "member", ["john"])
    assert api.api("GET", "/jobs", tok).status_code == 200
    assert api.api("POST", "/users/nia/revoke", api.admin).status_code == 200  # forgets what was verified
    hops.clear()
    r = api.api("GET", "/jobs", tok)
    assert r.status_code == 401 and "unknown or revoked" in r.text and hops == ["current_principal"]
    for headers in ({"Authorization": "Basic " + tok}, {"Authorization": "Bearer"}, {}):
        r = api.request("GET", "/api/v1/jobs", token="", headers=headers)
        assert r.status_code == 401, (headers, r.text)
    job_token = "fpj." + "x" * 40  # a job's token, never the caller of these routes
    r = api.request("GET", "/api/v1/jobs", token="", headers={"Authorization": f"Bearer {job_token}"})
    assert r.status_code == 403 and "job token" in r.text
    assert hops == ["current_principal"] * 5
