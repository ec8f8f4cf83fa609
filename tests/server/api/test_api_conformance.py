"""The API answers in the order its document promises: who may call a route is checked before what is sent."""

from __future__ import annotations

from pathlib import Path

from ... import httpclient
from ..conftest import SEED_SPEC, Server


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
        doc = httpclient.get(s.url + "/openapi.json", timeout=10).json()
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


def test_the_api_document_states_what_the_server_accepts(tmp_path: Path):
    """What a schema can say is in the schemas (a spec's fields, two different teams, dates, whole numbers as
    JSON Schema counts them); what it cannot (a team that must exist, a rule between fields) is in the
    operation's x-fairpod-rules, with the status that refuses it."""
    s = Server(tmp_path, SEED_SPEC)
    s.start()
    try:
        doc = httpclient.get(s.url + "/openapi.json", timeout=10).json()
        paths, schemas = doc["paths"], doc["components"]["schemas"]
        for path, method in (("/api/v1/spec", "put"), ("/api/v1/spec/dry-run", "post")):
            body = paths[path][method]["requestBody"]["content"]["application/json"]["schema"]
            assert body == {"$ref": "#/components/schemas/ClusterSpec"}, body
        assert schemas["ClusterSpec"]["additionalProperties"] is False
        assert schemas["InstanceGroup"]["additionalProperties"] is False
        team = {p["name"]: p["schema"] for p in paths["/api/v1/explain/teams"]["get"]["parameters"]}["team"]
        assert (team["minItems"], team["maxItems"], team["uniqueItems"]) == (2, 2, True)
        when = {p["name"]: p["schema"] for p in paths["/api/v1/reports/usage"]["get"]["parameters"]}["from"]
        assert [a.get("format") for a in when["anyOf"]] == ["date", "date-time", None]  # empty: the default
        for path, method, status in (("/api/v1/jobs", "post", "400"), ("/api/v1/jobs/array", "post", "400"),
                                     ("/api/v1/teams", "post", "422"), ("/api/v1/teams/{name}", "put", "422"),
                                     ("/api/v1/policy", "put", "422"), ("/api/v1/users", "post", "422"),
                                     ("/api/v1/spec", "put", "422"), ("/api/v1/reports/usage", "get", "422")):
            op = paths[path][method]
            assert op["x-fairpod-rules"][status], (path, op.get("x-fairpod-rules"))
            assert "cannot state" in op["responses"][status]["description"], (path, op["responses"][status])
        assert "x-fairpod-rules" not in paths["/api/v1/jobs/{ref}/progress"]["post"]

        # whole numbers: 3.0 is the integer 3 (JSON Schema's integer), a boolean is no number
        s.submit(name="p", team="john", command=["sleep", "600"])
        s.wait_state("p", "Running")
        r = s.api("POST", "/jobs/p/progress", json={"step": 3.0})
        assert r.status_code == 200 and r.json()["checkpoint"]["step"] == 3, r.text
        assert s.api("POST", "/jobs/p/progress", json={"step": True}).status_code == 422
        assert s.api("POST", "/jobs/p/progress", json={"step": 3.5}).status_code == 422
        r = s.api("POST", "/spec/rollback", json={"version": 1.0})
        assert r.status_code == 200, r.text
        # the last day a date can name is refused by the stated rule, not by a server error
        r = s.api("GET", "/reports/usage", params={"from": "9999-12-30", "to": "9999-12-31"})
        assert r.status_code == 422 and "9999-12-30" in r.json()["detail"], r.text
        r = s.api("GET", "/reports/usage", params={"from": "0001-01-01", "to": "0001-01-02"})
        assert r.status_code == 422, r.text
    finally:
        s.kill()
        s.kill_replicas()
