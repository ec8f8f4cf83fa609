"""The API answers in the order its document promises: who may call a route is checked before what is sent."""

from __future__ import annotations

from pathlib import Path

import httpx

from .conftest import SEED_SPEC, Server


def test_a_member_gets_403_for_a_node_action_whatever_the_body(tmp_path: Path):
    s = Server(tmp_path, SEED_SPEC)
    s.start()
    try:
        r = s.api("POST", "/users", json={"name": "mia", "role": "member", "teams": ["john"]})
        assert r.status_code == 201, r.text
        member = r.json()["token"]
        node = next(iter(n["name"] for n in s.api("GET", "/nodes").json()["nodes"]))
        for body in ({"kind": 5}, [1, 2], "text", {}):
            r = s.api("POST", f"/nodes/{node}/cordon", token=member, json=body)
            assert r.status_code == 403, (body, r.status_code, r.text)
        assert s.api("POST", f"/nodes/{node}/inject-fault", json={"kind": 5}).status_code == 422  # an admin: 422
        assert s.api("POST", f"/nodes/{node}/cordon").status_code == 200
    finally:
        s.kill()


def test_the_api_document_states_windows_and_integer_bounds(tmp_path: Path):
    s = Server(tmp_path, SEED_SPEC)
    s.start()
    try:
        doc = httpx.get(s.url + "/openapi.json", timeout=10).json()
        for path in ("/api/v1/usage/history", "/api/v1/dashboard/tasks"):
            params = {p["name"]: p["schema"] for p in doc["paths"][path]["get"]["parameters"]}
            assert params["window"]["enum"] == ["1h", "6h", "1d", "7d"], params["window"]
        schemas = doc["components"]["schemas"]
        assert max(v.get("maximum", 0) for v in schemas["Progress"]["properties"]["step"]["anyOf"]) == 2**53 - 1
        assert schemas["Rollback"]["properties"]["version"]["maximum"] == 2**53 - 1
        r = s.api("POST", "/spec/rollback", json={"version": True})  # a boolean is no version
        assert r.status_code == 422, r.text
        assert s.api("GET", "/usage/history", params={"window": "2h"}).status_code == 422
    finally:
        s.kill()
