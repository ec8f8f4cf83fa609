"""How many requests the API runs at once: 8 threads by default (anyio's own default is 40), FAIRPOD_API_THREADS
to change it, a one-line error for a bad value. In-process app (``inproc``: real SQLite, timed executor)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio.to_thread
import pytest
from fastapi.testclient import TestClient

from fairpod.server.app import API_THREADS, create_app

from .inproc import InProc


@pytest.fixture
def h(tmp_path: Path) -> Iterator[InProc]:
    h = InProc(tmp_path)
    yield h
    h.close()


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


@pytest.mark.parametrize("bad", ["many", "0", "-4", "2.5", "100000"])
def test_a_bad_fairpod_api_threads_is_one_line(h: InProc, monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("FAIRPOD_API_THREADS", bad)
    with pytest.raises(SystemExit) as e:
        create_app(h.cp, b"k" * 32)
    assert str(e.value) == f"fairpod: error: FAIRPOD_API_THREADS must be a whole number from 1 to 1000, not {bad!r}"
