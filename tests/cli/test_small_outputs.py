"""What the CLI prints, read from the real API in-process (tests/server/inproc_api.py): the CLI's own client, its
requests answered by the app instead of a socket, so each line is checked without a server's start.

- get-job of a container job says its image and pull policy;
- node health's figures are key=value (a deep check's GPU reading was a Python dict);
- node list's column of job ids says so (JOB IDS: the ids read as counts under JOBS);
- an action typed where a setting was meant ('team lend', 'report csv') says where that setting is.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from fairpod.cli import client as cli_client
from fairpod.cli.main import main

from ..server.inproc_api import Api


class _Answer:
    def __init__(self, r: Any) -> None:
        self.status, self.headers, self._raw = r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content

    def read(self) -> bytes:
        return self._raw


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    a = Api(tmp_path_factory.mktemp("api"))
    yield a
    a.close()


@pytest.fixture
def cli(api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """``fairpod ARGS`` in this process, as the admin; (exit code, stdout, stderr)."""
    def send(self: Any, method: str, path: str, body: bytes | None, headers: Any, timeout: Any) -> _Answer:
        hdrs = {**self.headers, **headers, "Authorization": f"Bearer {api.admin}"}
        if body is not None:
            hdrs["Content-Type"] = "application/json"
        return _Answer(api.client.request(method, path, content=body, headers=hdrs))

    monkeypatch.setattr(cli_client.Client, "_send", send)
    monkeypatch.setenv("FAIRPOD_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("FAIRPOD_TOKEN", api.admin)

    def run(*args: str) -> tuple[int, str, str]:
        try:
            rc = main(list(args))
        except SystemExit as e:
            rc = int(e.code or 0)
        out = capsys.readouterr()
        return rc, out.out, out.err

    return run


def test_get_job_shows_the_image_and_its_pull_policy(api: Api, cli):
    api.submit(name="in-image", team="john", image="docker.io/library/busybox:1.36",
               image_pull_policy="IfNotPresent", command=["sleep", "1"])
    api.submit(name="on-host", team="john", command=["sleep", "1"])
    rc, out, err = cli("get-job", "in-image")
    assert rc == 0, err
    assert re.search(r"^Image:\s+docker\.io/library/busybox:1\.36 \(pull IfNotPresent\)$", out, re.M), out
    rc, out, _ = cli("get-job", "on-host")
    assert rc == 0 and "Image:" not in out, out  # a host command has none


def test_node_health_prints_figures_as_key_value(api: Api, cli):
    node = api.api("GET", "/nodes").json()["nodes"][0]["name"]
    assert api.cp.health is not None
    api.cp.health.deep_check(node, "on demand")  # the stress check on this node, as `fairpod node check` asks
    checks = api.api("GET", f"/nodes/{node}/health").json()["checks"]
    assert any(isinstance(v, dict) for c in checks for v in c.values()), checks  # a reading: nested figures
    rc, out, err = cli("node", "health", node)
    assert rc == 0, err
    lines = [ln for ln in out.splitlines() if ln.strip().startswith(("info", "warning", "error"))]
    assert lines, out
    assert not any("{" in ln or "}" in ln or "': " in ln for ln in lines), out  # no Python dict
    figures = [shlex.split(f) for f in re.findall(r"  \((\w+=.*)\)$", "\n".join(lines), re.M)]
    assert figures and all(re.fullmatch(r"\w+=\S.*", w) for f in figures for w in f), figures  # words of k=v
    reading = next(w for f in figures for w in f if w.startswith("reading="))
    assert "name:virtual slot," in reading and "source:virtual" in reading, figures  # one word, spaces and all


def test_node_list_names_its_job_column_job_ids(api: Api, cli):
    job = api.submit(name="holds-a-node", team="smith", command=["sleep", "60"])
    api.turn_until(lambda: api.job("holds-a-node")["state"] == "Running", what="holds-a-node to run")
    rc, out, err = cli("node", "list")
    assert rc == 0, err
    head, *rows = out.splitlines()
    assert "JOB IDS" in head and not re.search(r"\bJOBS\b", head), head
    at = head.index("JOB IDS")
    placed = api.job("holds-a-node")["placement"][0]
    row = next(r for r in rows if r.startswith(placed + " "))
    assert row[at:].split()[0] == str(job["id"]), (head, row)
    api.api("POST", "/jobs/holds-a-node/cancel")


@pytest.mark.parametrize(("args", "said"), [
    (("team", "lend", "john"), "'lend' is not an action but a setting: fairpod team update --strategy Lend, or "
                               "fairpod team update --lending-limit"),
    (("report", "csv"), "'csv' is not an action but a setting: fairpod report usage --output csv"),
])
def test_an_action_that_is_a_setting_says_where_it_is(cli, args: tuple[str, ...], said: str):
    rc, out, err = cli(*args)
    assert rc == 2 and said in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and not out


def test_an_unknown_action_of_no_setting_lists_the_actions(cli):
    rc, _, err = cli("team", "frobnicate")
    assert rc == 2 and err.strip() == ("fairpod team: error: unknown action 'frobnicate'; one of create, update, "
                                       "delete, list; see 'fairpod team --help'"), err
