"""Sandbox tests run against this kernel's cgroups (no mock): they skip, saying why, where it has none usable."""

from __future__ import annotations

import pwd
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from fairpod.executors import LocalExecutor
from fairpod.sandbox import cgroups, users

from .. import reaper
from ..executors.helpers import kill_recorded
from ..server.conftest import Server, running

T = TypeVar("T")


# the seed spec's teams (examples/seed/spec.yaml): every worker's live servers run replicas as their users at any
# time, so a test never removes them, though they may appear while it runs (another worker's server made them)
SHARED_USERS = {users.user_name("john"), users.user_name("smith")}


def team_users() -> set[str]:
    """The per-team users (``fairpod-<team>``) on this host now."""
    return {p.pw_name for p in pwd.getpwall() if p.pw_name.startswith(users.PREFIX)}


def remove_users_made_since(before: set[str]) -> None:
    """Remove the per-team users that appeared since ``before`` (what the test's servers made), except the seed
    teams' (SHARED_USERS). A replica of another worker's server whose user was removed under it failed to start
    ("cannot start sleep in its sandbox: Exception occurred in preexec_fn", seen in a fresh-clone run)."""
    for name in team_users() - before - SHARED_USERS:
        subprocess.run(["userdel", "--force", name], capture_output=True, check=False)


def wait_for(pred: Callable[[], T | None], timeout: float, step: float = 0.05) -> T:
    """``pred()``'s first true value, polled until ``timeout`` (an OSError counts as not yet)."""
    end = time.monotonic() + timeout
    while True:
        try:
            v = pred()
        except OSError:
            v = None
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {pred}")
        time.sleep(step)


@pytest.fixture
def full_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole sandbox, files included (the suite runs with limits only: tests/conftest.py)."""
    monkeypatch.setenv("FAIRPOD_SANDBOX", "full")


@pytest.fixture
def hierarchy() -> cgroups.Hierarchy:
    try:
        return cgroups.detect()
    except cgroups.CgroupError as e:
        pytest.skip(f"no usable cgroup hierarchy on this host: {e}")


@pytest.fixture
def ex(tmp_path: Path, hierarchy: cgroups.Hierarchy, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalExecutor]:
    monkeypatch.setenv("FAIRPOD_PIDS_MAX", "64")  # the supervisors (forked from the executor's fork server) read it
    yield from local_executor(tmp_path / "runs")


def local_executor(root: Path) -> Iterator[LocalExecutor]:
    """A local executor on ``root`` for one test; afterwards its replicas are stopped and whatever they left killed."""
    reaper.runs(root)
    e = LocalExecutor(root)
    yield e
    for jname, attempt in e.running().items():
        e.stop(jname, attempt, 0.0)
    try:
        wait_for(lambda: not e.running() or None, 10.0)
    finally:
        e.close()
        kill_recorded(root)


def live_server(tmp_path: Path, jobs: tuple[str, ...], spec: str | None = None,
                before_start: Callable[[Server], None] | None = None) -> Iterator[Server]:
    """A real ``fairpod up`` (tests/server's ``Server``); afterwards, once it and its replicas are killed, the
    cgroups of the jobs named ``jobs`` (``<name>-<id>.<attempt>.<rank>.<digest>``) are removed: the test made them."""
    try:
        tmp_path.mkdir(parents=True, exist_ok=True)
        yield from (running(tmp_path, spec, before_start) if spec is not None
                    else running(tmp_path, before_start=before_start))
    finally:
        try:
            h = cgroups.detect()
        except cgroups.CgroupError:
            return
        for d in {d.name for j in jobs for d in group_dirs(h, f"{j}-")}:
            h.discard(d)


def group_dirs(h: cgroups.Hierarchy, job: str) -> list[Path]:
    """The cgroup directories left of ``job`` (its replicas' groups are named ``<job>.<attempt>.<rank>.<digest>``)."""
    return [d for b in h.bases.values() if b.is_dir() for d in b.iterdir()
            if d.is_dir() and d.name.count(".") >= 2 and d.name.startswith(job if job.endswith("-") else f"{job}.")]
