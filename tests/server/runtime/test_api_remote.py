"""``fairpod api`` (fairpod.server.runtime.apiserver): an API process of its own on another address (127.0.0.2,
as another host would be) against the core's PostgreSQL database, beside a live core that runs ``--api-workers 1``
on it (one live server for the module, on a real PostgreSQL server the module starts: tests/store/conftest.py).
A submit through it runs; one accepted while the core is stopped (by its PID) is admitted when the core is back.
(What it cannot start with: tests/server/runtime/test_api_postgres.py, in-process.)"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fairpod.server.runtime import heap
from fairpod.store import Store
from tests.ports import free_port
from tests.store.conftest import pg_url, wipe  # noqa: F401  (the fixture: a real PostgreSQL server)

from ..conftest import Server, running, wait_for

WORKER = "fairpod-api-worker"
ADDRESS = "127.0.0.2"


def workers_on_postgres(tmp: Path, url: str, workers: int) -> Iterator[Server]:
    """A live ``fairpod up --api-workers N`` on the tests' PostgreSQL at ``url``, emptied first (a module's
    fixture: stopped at its end)."""
    s0 = Store(url)
    wipe(s0.engine)
    s0.close()

    def on_postgres(s: Server) -> None:
        s.db = url
        s.extra = ["--api-workers", str(workers)]

    yield from running(tmp, before_start=on_postgres)


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[Server]:  # noqa: F811
    yield from workers_on_postgres(tmp_path_factory.mktemp("core"), pg_url, 1)


class ApiProcess:
    """``fairpod api`` started by the test (``start()`` again on the same address after a kill), stopped by its
    PID."""

    def __init__(self, tmp: Path, core: Server, url: str) -> None:
        self.home = tmp / "api-home"
        self.home.mkdir(mode=0o700)
        shutil.copy(core.home / "job-token.key", self.home / "job-token.key")  # what the admin copies
        os.chmod(self.home / "job-token.key", 0o600)
        self.port = free_port()
        self.url = f"http://{ADDRESS}:{self.port}"
        self.core_url = core.url
        self.env = {**core.env, "FAIRPOD_HOME": str(self.home), "FAIRPOD_DB_URL": url}
        self.log = open(tmp / "api.log", "ab")  # noqa: SIM115 - closed in stop()
        self.token = core.token
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "fairpod.cli.main", "api", "--core", self.core_url,
                                      "--address", ADDRESS, "--port", str(self.port)], env=self.env,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(self.ready, 60, "fairpod api to serve")

    def ready(self) -> bool:
        assert self.proc.poll() is None, (self.home.parent / "api.log").read_text()
        try:
            return self.api("GET", "/jobs?limit=1").status_code == 200
        except httpx.HTTPError:
            return False

    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        with httpx.Client(timeout=30) as c:
            return c.request(method, self.url + "/api/v1" + path, headers={"Authorization": f"Bearer {self.token}"},
                             **kw)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        self.log.close()


@pytest.fixture(scope="module")
def api(core: Server, tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[ApiProcess]:  # noqa: F811
    a = ApiProcess(tmp_path_factory.mktemp("api"), core, pg_url)
    yield a
    a.stop()


def job(name: str) -> dict[str, Any]:
    return {"name": name, "team": "john", "instance_type": "ml.g5.12xlarge", "nodes": 1, "accelerators": 1,
            "command": ["true"]}


def test_a_submit_through_fairpod_api_runs(core: Server, api: ApiProcess) -> None:
    r = api.api("POST", "/jobs", json=job("remote-run"))
    assert r.status_code == 201, r.text
    assert int(r.headers[WORKER]) == api.proc.pid  # answered by the API process, not the core or its worker
    core.wait_state("remote-run", "Succeeded")
    ev = api.api("GET", f"/jobs/{r.json()['id']}/events")  # not served there: the core's answer, passed on
    assert ev.status_code == 200 and ev.json()["events"][0]["kind"] == "JobSubmitted"
    assert core.job("remote-run")["state"] == "Succeeded"  # and through the core's own worker on PostgreSQL
    cmdline = Path(f"/proc/{api.proc.pid}/cmdline").read_bytes()
    assert b"postgresql" not in cmdline and b"job-token" not in cmdline  # no secret on its command line
    # the cycle collector at the server's thresholds, what the app built frozen (server/runtime/heap.py)
    said = (api.home.parent / "api.log").read_text(errors="replace")
    assert f"cycle collector thresholds {','.join(map(str, heap.THRESHOLDS))}; " in said, said[-2000:]


def test_a_submit_accepted_while_the_core_is_down_runs_when_it_returns(core: Server, api: ApiProcess) -> None:
    assert core.proc is not None
    core.kill(signal.SIGTERM)  # by its PID; its API worker ends with it, fairpod api does not
    r = api.api("POST", "/jobs", json=job("remote-down"))
    assert r.status_code == 201, r.text
    assert api.api("GET", "/jobs/remote-down?team=john").json()["state"] == "Pending"
    down = api.api("POST", f"/jobs/{r.json()['id']}/cancel")  # the core's route: it says it is not there
    assert down.status_code == 502 and down.json()["title"] == "core unavailable"
    core.start()
    core.wait_state("remote-down", "Succeeded")
    assert api.proc.poll() is None
