"""The live server's own hardening: a minimum runtime cannot block reclaim, the schema fuzzer finds no server error,
the CLI says when a list is cut, a stale pid file is not trusted. Bad input and overreach at the API, in-process:
test_api_input.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fairpod.server.api import api_rules

from ... import httpclient
from ..conftest import Server, wait_for

SEED = Path(__file__).resolve().parents[3] / "examples" / "seed" / "spec.yaml"


@pytest.fixture
def seed(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path, SEED)
    s.start()
    yield s
    s.kill()
    s.kill_replicas()


def _raw(server: Server, method: str, path: str, body: bytes | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    return httpclient.request(method, server.url + "/api/v1" + path, headers=headers, content=body, timeout=30)


def test_min_runtime_is_bounded_by_the_policy_and_cannot_block_reclaim(seed: Server):
    for bad in (b'{"name":"x","team":"smith","min_runtime_seconds":1e300}',
                b'{"name":"x","team":"smith","min_runtime_seconds":Infinity}',
                b'{"name":"x","team":"smith","min_runtime_seconds":NaN}'):
        r = _raw(seed, "POST", "/jobs", bad)
        assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", r.text
    r = seed.api("POST", "/jobs", json={"name": "x", "team": "smith", "min_runtime_seconds": 7200})
    assert r.status_code in (400, 422) and "policy.max_min_runtime_seconds" in r.json()["detail"], r.text
    assert seed.api("GET", "/jobs").json()["count"] == 0
    # smith borrows all of john's idle quota with a job protected for the policy's maximum (1 h) ...
    seed.submit(name="hog", team="smith", nodes=2, command=["sleep", "600"], min_runtime_seconds=3600)
    seed.wait_state("hog", "Running")
    # ... then the admin lowers the bound: john's reclaim gets through once it has passed
    pol = seed.api("GET", "/policy").json()
    pol["max_min_runtime_seconds"] = 2
    assert seed.api("PUT", "/policy", json=pol).status_code == 200
    seed.submit(name="mine", team="john", nodes=3, command=["sleep", "5"])
    seed.wait_state("mine", "Running", 60)
    assert seed.job("hog")["preemptions"] >= 1


# schemathesis's own expected statuses for "valid data is accepted" (positive_data_acceptance)
ACCEPTING = ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx"]


def schemathesis_config(doc: dict[str, Any], ref: str) -> str:
    """schemathesis.toml for a run against fairpod's API document ``doc``: job routes aimed at the job ``ref``;
    an operation may refuse a schema-valid request only with the statuses its ``x-fairpod-rules`` name (a rule
    the schema cannot state: something that must exist now, or a rule between fields)."""
    lines = ["[parameters]", f'"path.ref" = "{ref}"']
    for path, ops in sorted(doc["paths"].items()):
        for method, op in sorted(ops.items()):
            extra = [str(s) for s in api_rules.statuses(op)]
            if extra:
                lines += ["", "[[operations]]", f'include-name = "{method.upper()} {path}"',
                          f"checks.positive_data_acceptance.expected-statuses = {json.dumps(ACCEPTING + extra)}"]
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_conformance_failure(tmp_path: Path):
    """schemathesis (``python -m schemathesis.cli``, every check, ``positive_data_acceptance`` too: a request
    the document calls valid is accepted, or refused only by a rule the operation states in ``x-fairpod-rules``)
    against a real ``fairpod up`` on a free port, its job routes pointed at real jobs (``path.ref``) so that
    they answer more than 404. A fixed seed, a few examples per operation, bounded in time."""
    pytest.importorskip("schemathesis")
    server = Server(tmp_path, SEED)
    server.executor = "timed"  # jobs run no processes: the fuzzer may submit thousands
    server.start()
    try:
        server.submit(name="seeded", team="john", command=["sleep", "600"])
        for i in range(3):
            server.submit(name=f"seeded-{i}", team="smith", command=["sleep", "600"])
        server.wait_state("seeded", "Running")
        doc = httpclient.get(f"{server.url}/openapi.json", timeout=30).json()
        (tmp_path / "schemathesis.toml").write_text(schemathesis_config(doc, "seeded"))
        r = subprocess.run(
            [sys.executable, "-m", "schemathesis.cli", "--config-file", str(tmp_path / "schemathesis.toml"),
             "run", f"{server.url}/openapi.json", "-H", f"Authorization: Bearer {server.token}",
             "--checks", "all", "--max-time", "30", "--request-timeout", "5", "--exclude-path-regex", "logs",
             "--seed", "7", "--max-examples", "3", "--workers", "1"],
            capture_output=True, text=True, timeout=240, env=server.env, cwd=tmp_path)
        tail = r.stdout[-8000:]
        assert r.returncode == 0, tail
        assert "Server error" not in r.stdout and "Schema-valid request rejected" not in r.stdout, tail
        assert "No issues found" in r.stdout or "failures" not in r.stdout.lower(), tail
    finally:
        wait_for(lambda: True, 1)
        server.kill()


def test_list_jobs_shows_the_newest_and_says_when_it_is_cut(seed: Server):
    for i in range(7):
        seed.submit(name=f"j{i}", team="john", command=["true"])
    page = seed.api("GET", "/jobs?limit=5").json()
    assert [j["name"] for j in page["jobs"]] == ["j2", "j3", "j4", "j5", "j6"]
    assert page["truncated"] and page["total"] == 7 and page["count"] == 5
    everything = seed.api("GET", "/jobs?limit=0").json()
    assert everything["count"] == 7 and not everything["truncated"]
    r = seed.cli("list-jobs", "--limit", "3")
    assert "j6" in r.stdout and "j3" not in r.stdout
    assert "the newest 3 of 7 jobs; --limit 0 shows all" in r.stderr
    r = seed.cli("list-jobs", "--limit", "0")
    assert "j0" in r.stdout and "newest" not in r.stderr


def test_down_and_up_do_not_trust_a_stale_pid_file(tmp_path: Path):
    server = Server(tmp_path, SEED)
    server.home.mkdir(parents=True)
    bystander = subprocess.Popen(["sleep", "120"])  # a live process that is not fairpod
    zombie = subprocess.Popen(["true"])
    try:
        wait_for(lambda: Path(f"/proc/{zombie.pid}/stat").read_text().split(") ")[1].startswith("Z"), 10, "zombie")
        for content in (f"{bystander.pid} 1 12345\n", f"{bystander.pid} 1\n"):
            (server.home / "server.pid").write_text(content)
            r = server.cli("down")
            assert "not running" in r.stdout and bystander.poll() is None  # nothing was killed
            assert not (server.home / "server.pid").exists()
        (server.home / "server.pid").write_text(f"{zombie.pid} 1\n")  # a server killed -9, not reaped yet
        server.start()  # comes up at once
        assert server.cli("down").returncode == 0
        assert server.proc is not None and server.proc.wait(timeout=30) is not None  # our server stopped
    finally:
        bystander.kill()
        bystander.wait()
        zombie.wait()
        server.kill()
