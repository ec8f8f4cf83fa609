"""The real HTTP API in-process: what ``fairpod up`` builds (``daemon.initialize``: database, spec, admin user and
token; ``runtime.build``: store, control plane, node health, the FastAPI app), over a real SQLite file under
``tmp``, served on ``fastapi.testclient.TestClient`` instead of a socket. Requests go through the app's whole stack
(middleware, auth, RBAC, routes, error mapping) in this process, so a route, RBAC or error test costs what its
requests cost, not a server's start.

The reconcile loop does not run by itself: ``turn()`` runs one turn (``cp.reconcile_once``), so a test decides
when jobs are admitted. The executor is ``timed`` by default (no processes: each replica "runs" for its ``sleep N``
on the real clock); ``executor="local"`` starts real processes (which cannot call the API back: nothing listens
on their ``FAIRPOD_API_URL``; a test of the SDK wants a live server). Tokens: ``admin`` (from ``fairpod up``), and
``member`` (team john), ``other`` (member of team smith) and ``viewer`` made through ``POST /users``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from fairpod.server.runtime.daemon import initialize
from fairpod.server.runtime.wiring import Runtime, build, make_executor

from .. import reaper
from ..executors.helpers import stop_runs
from .faults import fail_writes

SEED_SPEC = Path(__file__).resolve().parents[2] / "examples" / "seed" / "spec.yaml"


class Api:
    def __init__(self, tmp: Path, spec: Path | str = SEED_SPEC, executor: str = "timed",
                 api_workers: bool = False, db: str | None = None) -> None:
        if isinstance(spec, str):
            (tmp / "spec.yaml").write_text(spec)
            spec = tmp / "spec.yaml"
        self.home = tmp / "home"
        self.url = db or f"sqlite:///{self.home / 'fairpod.db'}"  # db: another database (a PostgreSQL URL)
        store, token = initialize(self.home, self.url, str(spec), 0)
        store.close()
        assert token is not None
        self.token = self.admin = token
        self.local = executor == "local"
        if self.local:
            reaper.runs(self.home / "runs")  # an interrupted run stops its replicas too
        self.rt: Runtime = build(self.home, self.url, make_executor(self.home, executor), "http://127.0.0.1:9",
                                 api_workers=api_workers)
        self.cp = self.rt.cp
        self.store = self.rt.store
        self.client = TestClient(self.rt.app, base_url="http://127.0.0.1:9", raise_server_exceptions=False)
        self.client.__enter__()  # runs the app's lifespan (its thread limit, the switch interval)
        self._faults: list[Callable[[], None]] = []
        self.member = self.user("mia", "member", ["john"])
        self.other = self.user("oscar", "member", ["smith"])
        self.viewer = self.user("vic", "viewer", [])

    # -- requests ---------------------------------------------------------------------------------
    def request(self, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
        """A request to ``path`` (from the root: ``/healthz``, ``/metrics``); ``token=""`` sends none."""
        headers = dict(kw.pop("headers", {}))
        tok = self.token if token is None else token
        if tok:
            headers["Authorization"] = f"Bearer {tok}"
        return self.client.request(method, path, headers=headers, **kw)

    def api(self, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
        """A request to ``/api/v1`` + ``path`` (the signature of ``conftest.Server.api``)."""
        return self.request(method, "/api/v1" + path, token, **kw)

    def user(self, name: str, role: str, teams: list[str]) -> str:
        """Create a user through the API (as admin); its token."""
        r = self.api("POST", "/users", self.admin, json={"name": name, "role": role, "teams": teams})
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    def job(self, name: str, token: str | None = None) -> dict[str, Any]:
        r = self.api("GET", f"/jobs/{name}", token)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def submit(self, token: str | None = None, **spec: Any) -> dict[str, Any]:
        r = self.api("POST", "/jobs", token, json=spec)
        assert r.status_code == 201, r.text
        return dict(r.json())

    # -- the control plane ------------------------------------------------------------------------
    def turn(self, n: int = 1) -> None:
        """``n`` turns of the reconcile loop."""
        for _ in range(n):
            self.cp.reconcile_once()

    def turn_until(self, pred: Callable[[], Any], turns: int = 50, what: str = "condition") -> Any:
        """Turns of the loop until ``pred()`` is true (at most ``turns``, 0.1 s apart at most: a timed replica
        ends on the real clock); returns its value."""
        last = None
        for _ in range(turns):
            self.turn()
            last = pred()
            if last:
                return last
            self.cp.wake.wait(0.1)
        raise AssertionError(f"{what} did not come in {turns} turns; last value: {last!r}")

    def activity(self) -> tuple[int, int]:
        """How far the replicas' supervisors have got: the files of the runs directory and their sizes (a start, a
        stop, a log line changes it)."""
        n = size = 0
        for f in (self.home / "runs").rglob("*"):
            try:
                st = f.stat()
            except OSError:  # gone since it was listed
                continue
            if not f.is_dir():
                n, size = n + 1, size + st.st_size
        return n, size

    def turns_while_busy(self, pred: Callable[[], Any], what: str, stall: float = 30.0) -> Any:
        """Turns of the loop until ``pred()`` is true, for as long as the replicas' processes make progress (starting
        and stopping real processes takes as long as the machine is busy): ``stall`` seconds without any progress
        (:meth:`activity`) is a failure, 300 s in all; returns its value."""
        from .conftest import wait_for  # (the conftest imports this module)

        def step() -> Any:
            self.turn()
            return pred()
        return wait_for(step, stall, what, self.activity, 300.0)

    def until(self, name: str, state: str, turns: int = 50) -> dict[str, Any]:
        """Turns of the loop until job ``name`` is in ``state``; the job."""
        return self.turn_until(lambda: (j := self.job(name))["state"] == state and j, turns, f"job {name} {state}")

    def fail_writes(self, when: Callable[[], bool] = lambda: True,
                    error: BaseException | type[BaseException] | None = None) -> Callable[[], None]:
        """Every later write to the database fails (``error``; default SQLite's "database or disk is full") while
        ``when()`` holds (``faults.fail_writes``). Returns the function that ends it."""
        self._faults.append(fail_writes(self.store.engine, when, error))
        return self._faults[-1]

    def close(self) -> None:
        while self._faults:
            self._faults.pop()()
        try:
            self.client.__exit__(None, None, None)
        finally:
            self.rt.close()
            if self.local:  # what its executor started and the test did not end (by recorded PID and start time)
                stop_runs(self.home / "runs")
