"""The CLI is a thin client: its read and submit commands import nothing of the server, the store,
SQLAlchemy, pydantic, FastAPI or httpx (checked in the process that ran the command)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from ..server.conftest import SEED_SPEC, Server


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server(tmp_path_factory.mktemp("imports"), SEED_SPEC)
    s.start()
    # the job the read commands show: made here, not by an earlier test (a parallel run spreads a module's tests
    # over workers, each with its own server)
    s.submit(name="seeded", team="john", command=["true"])
    yield s
    s.kill(signal.SIGTERM)
    s.kill_replicas()

FORBIDDEN = ("fairpod.server", "fairpod.store", "fairpod.executors", "fairpod.model.spec", "fairpod.model.jobs", "fairpod.governance",
             "sqlalchemy", "pydantic", "fastapi", "starlette", "uvicorn", "httpx", "yaml")
DRIVER = """
import json, sys
from fairpod.cli.main import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:  # --version, --help
    rc = e.code
FORBIDDEN = @FORBIDDEN@
heavy = sorted(m for m in sys.modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
print("\\n@@" + json.dumps({"rc": rc, "heavy": heavy, "startup": sorted({"shutil", "socket", "selectors", "encodings.idna"} & set(sys.modules))}), file=sys.stderr)
""".replace("@FORBIDDEN@", repr(FORBIDDEN))


def run(server: Server, *args: str) -> dict:
    r = subprocess.run([sys.executable, "-c", DRIVER, *args], env={**server.env, "FAIRPOD_TOKEN": server.token},
                       capture_output=True, text=True, timeout=60)
    return json.loads(r.stderr.rsplit("@@", 1)[1])


@pytest.mark.parametrize("args", [
    ["--version"], ["--help"], ["start-job", "--help"],
    ["start-job", "--name", "t", "--team", "john", "--", "true"],
    ["start-job", "--name", "arr", "--team", "john", "--array", "0-2", "--", "true"],
    ["list-jobs"], ["get-job", "seeded"], ["describe", "seeded"], ["list-pods", "seeded"], ["get-logs", "seeded"],
    ["cancel-job", "t"],
    ["status"], ["cluster", "show"], ["node", "list"], ["team", "list"], ["policy", "show"], ["user", "list"],
    ["squeue"], ["sinfo"], ["scancel", "999"], ["report", "usage"], ["dashboard"], ["completion", "bash"],
    ["list-jobs", "-o", "json"],
])
def test_commands_import_nothing_of_the_server(shared: Server, args: list[str]):
    res = run(shared, *args)
    if args in (["--help"], ["completion", "bash"]):  # the whole parser, 'up' and its list of executors included
        res["heavy"] = [m for m in res["heavy"] if m not in ("fairpod.executors", "fairpod.executors.registry")]
    assert res["heavy"] == [], f"fairpod {' '.join(args)} imported {res['heavy']}"
    assert res["rc"] in (0, 1), res  # 1: scancel 999 / cancel of a finished job, said in one line


def test_the_check_sees_a_heavy_import(shared: Server):
    """-o yaml (and validate, up) may import what they need: the check notices it."""
    assert "yaml" in run(shared, "list-jobs", "-o", "yaml")["heavy"]
    assert "pydantic" in run(shared, "validate", str(SEED_SPEC))["heavy"]


@pytest.mark.parametrize("args", [
    ["start-job", "--name", "s", "--team", "john", "--", "true"], ["list-jobs"], ["get-job", "seeded"],
])
def test_the_commonest_commands_skip_modules_they_do_not_need(shared: Server, args: list[str]):
    # argparse's formatters import shutil (bz2, lzma, fnmatch) for the width unless the parser gives one;
    # socket (with selectors and array) is not needed for a plain HTTP request: _socket is
    res = run(shared, *args)
    assert res["rc"] == 0 and res["startup"] == [], res


@pytest.mark.parametrize("args", [["list-jobs", "--help"], ["list-jobs"], ["start-job", "--help"], ["squeue"]])
def test_commands_do_not_read_the_executor_registry(tmp_path, args: list[str]):
    """Only 'fairpod up' lists the executors: any other command importing the registry pays ~8 ms (dataclasses,
    inspect) of its start. No server needed: a command that cannot reach one still built its parser and client."""
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "FAIRPOD_URL": "http://127.0.0.1:1",
           "PYTHONPATH": ":".join(sys.path)}
    r = subprocess.run([sys.executable, "-c", DRIVER, *args], env=env, capture_output=True, text=True, timeout=60)
    res = json.loads(r.stderr.rsplit("@@", 1)[1])
    assert res["heavy"] == [] and res["rc"] in (0, 1), (args, res)


def test_up_still_lists_the_executors(tmp_path):
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "up", "--help"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "--executor {local,ray,timed}" in r.stdout.replace("\n", " "), r.stdout


HYPERPOD = """
import json, sys
from fairpod.cli.hyperpod import main
rc = main(sys.argv[1:])
print("\\n@@" + json.dumps({"rc": rc, "parsers": sorted({"fairpod.cli.main", "fairpod.cli.job_cmds"} & set(sys.modules))}),
      file=sys.stderr)
"""


def test_hyperpod_start_job_builds_its_job_without_fairpods_parser(tmp_path):
    """hyperpod start-job types its values by the one flag table and submits: it no longer writes fairpod argv and
    parses it again (the submit fails here on a URL that is none, at once: the body was built); a bad value names
    hyperpod's flag."""
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "FAIRPOD_URL": "none://here",
           "FAIRPOD_TOKEN": "x", "PYTHONPATH": ":".join(sys.path)}
    args = ["start-job", "--job-name", "t", "--namespace", "hyperpod-ns-john", "--entry-script", "t.py"]
    r = subprocess.run([sys.executable, "-c", HYPERPOD, *args, "--node-count", "2"], env=env, capture_output=True,
                       text=True, timeout=60)
    res = json.loads(r.stderr.rsplit("@@", 1)[1])
    assert res == {"rc": 1, "parsers": []} and "the server URL 'none://here' is not an http:// URL" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-c", HYPERPOD, *args, "--node-count", "two"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.stderr.startswith("hyperpod: error: --node-count two: 'two' is not a number\n"), r.stderr
    assert json.loads(r.stderr.rsplit("@@", 1)[1])["rc"] == 2
