"""The API answers in the order its document promises: who may call a route is checked before what is sent."""

from __future__ import annotations

from pathlib import Path

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
