"""How many requests the API runs at once: 8 threads by default (anyio's own default is 40), FAIRPOD_API_THREADS
to change it, a one-line error for a bad value; the thread switch interval while it serves (1 ms,
FAIRPOD_SWITCH_INTERVAL_MS). In-process app (``inproc``: real SQLite, timed executor)."""

from __future__ import annotations

import sys

import anyio.to_thread
import pytest
from fastapi.testclient import TestClient

from fairpod.server.api.app import API_THREADS, SWITCH_INTERVAL_MS, create_app

from ..inproc import InProc


def threads_of(h: InProc) -> int:
    with TestClient(create_app(h.cp, b"k" * 32)) as c:
        assert c.get("/healthz").status_code == 200
        return int(c.portal.call(lambda: anyio.to_thread.current_default_thread_limiter().total_tokens))


def test_the_api_runs_eight_requests_at_once_by_default(h: InProc, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAIRPOD_API_THREADS", raising=False)
    assert threads_of(h) == API_THREADS == 8


def test_fairpod_api_threads_sets_it(h: InProc, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRPOD_API_THREADS", "3")
    assert threads_of(h) == 3


BAD_SETTINGS = [("FAIRPOD_API_THREADS", bad, "a whole number from 1 to 1000")
                for bad in ("many", "0", "-4", "2.5", "100000")] + [
               ("FAIRPOD_SWITCH_INTERVAL_MS", bad, "a number from 0.1 to 100")
                for bad in ("fast", "0", "-1", "1000", "nan")]


@pytest.mark.parametrize(("var", "bad", "must_be"), BAD_SETTINGS)
def test_a_bad_setting_is_one_line(h: InProc, monkeypatch: pytest.MonkeyPatch, var: str, bad: str,
                                   must_be: str) -> None:
    monkeypatch.setenv(var, bad)
    with pytest.raises(SystemExit) as e:
        create_app(h.cp, b"k" * 32)
    assert str(e.value) == f"fairpod: error: {var} must be {must_be}, not {bad!r}"


def switch_interval_while_serving(h: InProc) -> float:
    with TestClient(create_app(h.cp, b"k" * 32)) as c:
        assert c.get("/healthz").status_code == 200
        return float(c.portal.call(lambda: sys.getswitchinterval()))


def test_the_server_switches_threads_every_millisecond_and_gives_the_interval_back(
        h: InProc, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAIRPOD_SWITCH_INTERVAL_MS", raising=False)
    before = sys.getswitchinterval()
    assert switch_interval_while_serving(h) == pytest.approx(SWITCH_INTERVAL_MS / 1000) == pytest.approx(0.001)
    assert sys.getswitchinterval() == before  # the app's end restores it


def test_fairpod_switch_interval_ms_sets_it(h: InProc, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRPOD_SWITCH_INTERVAL_MS", "2.5")
    assert switch_interval_while_serving(h) == pytest.approx(0.0025)
