"""A database outage: PostgreSQL stopped under a running control plane (a real server the test starts and stops).
The log says it once when the store is lost and once when it is back, with the retry schedule, instead of a
traceback for every turn and request; ``/healthz`` answers 503 while it is out and 200 after; nothing is lost."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx

from tests.store.conftest import postgres_server, wipe

from ... import httpclient
from ..conftest import Server, wait_for

OUTAGE_S = 6.0  # long enough for ~24 turns of the loop and a few requests, as the 32 s of the report did


def _health(s: Server) -> int:
    try:
        return httpclient.get(s.url + "/healthz", timeout=5).status_code
    except httpx.HTTPError:
        return 0


def test_a_database_outage_is_said_once_answered_by_health_and_loses_nothing(tmp_path: Path) -> None:
    from fairpod.store import Store

    with postgres_server() as pg:
        s0 = Store(pg.url)
        wipe(s0.engine)
        s0.close()
        s = Server(tmp_path)
        s.db = pg.url
        s.start()
        try:
            s.submit(name="before", team="john", command=["sh", "-c", "echo before"])
            s.wait_state("before", "Succeeded", 30)
            # ends while the database is out: its exit must be taken once it is back
            s.submit(name="across", team="john", command=["sh", "-c", f"sleep {OUTAGE_S / 2}; echo across"])
            s.wait_state("across", "Running", 30)
            out = tmp_path / "server.out"
            lines0 = len(out.read_text(errors="replace").splitlines())
            pg.stop()
            t0 = time.monotonic()
            codes, health = [], []
            while time.monotonic() - t0 < OUTAGE_S:  # clients that keep asking, as the dashboard and a monitor do
                codes.append(s.api("GET", "/jobs").status_code)
                health.append(_health(s))
                time.sleep(0.2)
            pg.start()
            wait_for(lambda: _health(s) == 200, 30, "/healthz to answer 200 once the store is back")
            done = s.wait_state("across", "Succeeded", 30)
            assert done["reason"] == "all replicas exited 0"
            s.submit(name="after", team="john", command=["sh", "-c", "echo after"])
            s.wait_state("after", "Succeeded", 30)
            assert {j["name"] for j in s.api("GET", "/jobs").json()["jobs"]} >= {"before", "across", "after"}
            said = out.read_text(errors="replace").splitlines()[lines0:]
            print(f"{len(said)} log lines, {sum('Traceback' in x for x in said)} tracebacks during the outage")
            assert sum("Traceback" in x for x in said) == 0, "\n".join(said[:80])
            lost = [x for x in said if "store unreachable" in x]
            back = [x for x in said if "store is back" in x]
            assert len(lost) == 1 and "retrying" in lost[0], "\n".join(said[:80])
            assert len(back) == 1, "\n".join(said[:80])
            assert len(said) < 30, "\n".join(said)
            assert set(codes) <= {503, 200}, codes  # a 503 that says so, never a 500
            assert health[-5:] == [503] * 5, health  # while it is out (the first turn after the stop finds it)
        finally:
            s.kill(signal.SIGTERM)
            s.kill_replicas()
