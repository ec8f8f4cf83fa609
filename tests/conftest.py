"""Suite-wide: the report header says which engine runs (``fairpod.governance.engine_name``: native or pure Python)."""

from __future__ import annotations

import os

import pytest

from fairpod import governance


def pytest_report_header() -> str:
    return f"native engine: {governance.engine_name()}"


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("FAIRPOD_EXPECT_NATIVE") == "1" and not governance.is_native():
        raise pytest.UsageError("FAIRPOD_EXPECT_NATIVE=1 but the engine loaded is pure Python")


@pytest.fixture(autouse=True)
def _sandbox_limits_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replicas of the suite get their cgroup limits but not the files sandbox (fairpod.sandbox): as root it runs
    them as per-team users, who may not write the tests' own temporary folders (pytest makes them 0700) where the
    test programs leave their results. tests/sandbox turns the whole sandbox on for its own tests, the README's
    tour included (tests/sandbox/test_reach.py)."""
    monkeypatch.setenv("FAIRPOD_SANDBOX", "limits")
