"""An API worker's lean door for submits (fairpod.server.api.lean_submit): a worker's app over the same database
as a core built for API workers, in process (tests/server/inproc_api.py). What the door answers itself, and that
every answer, its own or FastAPI's behind it, is the answer of the core's own app to the same request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fairpod.executors.base import Traits
from fairpod.server.api.lean_submit import LeanSubmit
from fairpod.server.api.limits import MAX_BODY
from fairpod.server.runtime.wiring import build_worker

from ..inproc_api import Api

# the fields of a job's view that differ between two submits of the same body (the job's own identity and times)
OWN = {"id", "name", "submitted_at", "created_at", "updated_at", "seq", "log_path", "events_url"}


def job(name: str, team: str = "john", **more: Any) -> dict[str, Any]:
    return {"name": name, "team": team, "instance_type": "ml.g5.12xlarge", "nodes": 1, "accelerators": 1,
            "command": ["true"], **more}


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Api, TestClient, LeanSubmit]]:
    a = Api(tmp_path, api_workers=True)
    app = build_worker(a.home, a.url, Traits.of(a.rt.executor), "http://127.0.0.1:9")  # (no core listens there)
    door = app.app
    assert isinstance(door, LeanSubmit)
    with TestClient(app, base_url="http://127.0.0.1:9") as c:
        # the admin's token verified by this worker (a read): from now on the door knows it
        assert c.get("/api/v1/jobs?limit=1", headers={"Authorization": f"Bearer {a.token}"}).status_code == 200
        yield a, c, door
    a.close()


def _post(c: TestClient, door: LeanSubmit, token: str, body: bytes | str | None, **headers: str) -> tuple[Any, bool]:
    """POST /api/v1/jobs on the worker: ((status, body as JSON), whether the lean door answered it)."""
    before = door.answered
    r = c.post("/api/v1/jobs", content=body,
               headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers})
    return (r.status_code, r.json()), door.answered == before + 1


def _view(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k not in OWN and not k.endswith(("_at", "_time"))}


def test_a_valid_submit_is_answered_by_the_door_as_fastapis_route_answers_it(
        pair: tuple[Api, TestClient, LeanSubmit]) -> None:
    a, c, door = pair
    (s1, lean), by_door = _post(c, door, a.token, json.dumps(job("lean-1")), **{"Content-Type": "application/json"})
    assert (s1, by_door) == (201, True)
    # a media type FastAPI reads as JSON and this door leaves to it: the same body, through the route
    (s2, routed), by_door = _post(c, door, a.token, json.dumps(job("lean-2")),
                                  **{"Content-Type": "application/vnd.fairpod+json"})
    assert (s2, by_door) == (201, False)
    assert lean["name"] == "lean-1" and routed["name"] == "lean-2" and lean["id"] != routed["id"]
    assert _view(lean) == _view(routed) and set(lean) == set(routed)
    # with a charset: the door's
    (s3, _), by_door = _post(c, door, a.token, json.dumps(job("lean-3")),
                             **{"Content-Type": "Application/JSON; charset=utf-8"})
    assert (s3, by_door) == (201, True)
    listed = {j["name"] for j in a.api("GET", "/jobs?team=john&limit=0").json()["jobs"]}
    assert {"lean-1", "lean-2", "lean-3"} <= listed


def test_idempotency_keys_through_the_door(pair: tuple[Api, TestClient, LeanSubmit]) -> None:
    a, c, door = pair
    body = json.dumps(job("keyed"))
    (s1, first), d1 = _post(c, door, a.token, body, **{"Idempotency-Key": "k-1"})
    (s2, again), d2 = _post(c, door, a.token, body, **{"Idempotency-Key": "k-1"})
    assert (s1, d1, s2, d2, again["id"]) == (201, True, 200, True, first["id"])
    r = c.post("/api/v1/jobs", content=body, headers={"Authorization": f"Bearer {a.token}", "Idempotency-Key": "k-1",
                                                      "Content-Type": "application/json"})
    assert (r.status_code, r.headers.get("Idempotent-Replayed"), r.json()["id"]) == (200, "true", first["id"])
    (s3, reused), d3 = _post(c, door, a.token, json.dumps(job("other")), **{"Idempotency-Key": "k-1"})
    assert (s3, d3, reused["title"]) == (409, True, "idempotency key reused")
    assert [j["name"] for j in a.api("GET", "/jobs?team=john&limit=0").json()["jobs"]].count("keyed") == 1


BIG = MAX_BODY + 1


@pytest.mark.parametrize("name, headers, body, lean", [
    # the door's own answers: a valid request whose submit the route refuses
    ("too-big", {}, job("w-big", nodes=40), True),
    ("taken", {}, job("w-taken"), True),
    ("unknown-type", {}, {**job("w-type"), "instance_type": "ml.nope"}, True),
    # FastAPI's: what the door leaves to it
    ("field", {}, job("w-field", accelerators=-1), False),
    ("extra", {}, {**job("w-extra"), "gpus": 2}, False),
    ("not-json", {}, b"{\"name\": ", False),
    ("nan", {}, b'{"name": "w-nan", "team": "john", "instance_type": "ml.g5.12xlarge", "nodes": NaN, '
                b'"accelerators": 1, "command": ["true"]}', False),
    ("deep", {}, b"[" * 100_000 + b"]" * 100_000, False),
    ("text", {"Content-Type": "text/plain"}, job("w-text"), False),
    ("no-type", {"Content-Type": ""}, job("w-notype"), False),
    ("empty", {}, b"", False),
    ("key-long", {"Idempotency-Key": "k" * 256}, job("w-klong"), False),
    ("key-space", {"Idempotency-Key": "a b"}, job("w-kspace"), False),
    ("declared-too-large", {"Content-Length": str(BIG)}, b"x" * BIG, False),
    ("query", {}, job("w-query"), False),
])
def test_every_answer_is_the_cores_own(pair: tuple[Api, TestClient, LeanSubmit], name: str, headers: dict[str, str],
                                       body: Any, lean: bool) -> None:
    """A refusal through the worker, the door's or FastAPI's behind it, is word for word the core app's to the
    same request; the door answers only what it can answer as the route does."""
    a, c, door = pair
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    path = "/api/v1/jobs" + ("?dry=1" if name == "query" else "")
    if name == "taken":
        assert a.api("POST", "/jobs", json=job("w-taken")).status_code == 201
    headers = {"Content-Type": "application/json", **headers}
    if not headers["Content-Type"]:
        del headers["Content-Type"]
    before = door.answered
    via = c.post(path, content=raw, headers={"Authorization": f"Bearer {a.token}", **headers})
    assert door.answered == before + (1 if lean else 0), via.text
    if name == "query":  # (an unknown parameter: FastAPI ignores it) a job, created through the route
        assert via.status_code == 201, via.text
        return
    direct = a.request("POST", path, None, content=raw, headers=headers)
    assert (via.status_code, via.json()) == (direct.status_code, direct.json())
    assert via.status_code in (400, 401, 403, 409, 413, 422), via.text


def test_a_body_too_large_in_chunks_is_fastapis_413(pair: tuple[Api, TestClient, LeanSubmit]) -> None:
    a, c, door = pair
    chunks = [b"x" * 65536] * (MAX_BODY // 65536 + 2)
    headers = {"Authorization": f"Bearer {a.token}", "Content-Type": "application/json"}
    r = c.post("/api/v1/jobs", content=iter(chunks), headers=headers)
    assert (r.status_code, r.json()["title"], door.answered) == (413, "request body too large", 0)
    direct = a.request("POST", "/api/v1/jobs", None, content=iter(chunks), headers=headers)
    assert (direct.status_code, direct.json()) == (r.status_code, r.json())


def test_callers_the_door_leaves_to_the_app(pair: tuple[Api, TestClient, LeanSubmit]) -> None:
    """A token not verified by this worker yet, an unknown one, two Authorization headers: authenticated by the
    app as before (its first answer), and a member's submit for another team refused as the core refuses it."""
    a, c, door = pair
    member = a.member
    body = json.dumps(job("w-other", team="smith"))
    first, by_door = _post(c, door, member, body)  # the worker has not seen this token: the app's thread reads it
    again, by_door_again = _post(c, door, member, body)  # now verified here a moment ago: the door's
    direct = a.api("POST", "/jobs", member, content=body, headers={"Content-Type": "application/json"})
    assert first == again == (403, direct.json()) and (by_door, by_door_again) == (False, True)
    unknown, by_door = _post(c, door, "not-a-token", json.dumps(job("w-unknown")))
    assert (unknown[0], by_door) == (401, False)
    r = c.post("/api/v1/jobs", content=json.dumps(job("w-two-auth")),
               headers=[("Authorization", f"Bearer {a.token}"), ("Authorization", "Bearer not-a-token"),
                        ("Content-Type", "application/json")])
    assert r.status_code == 201 and door.answered == 1  # (the first header counts, as Starlette reads it)
