"""Supervisors forked from the executor's fork server, and the exit watch that wakes the control plane."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from fairpod.executors import LocalExecutor, procs, state

from .helpers import PY, job, wait_exits, wait_for


def test_supervisors_come_from_the_fork_server_and_exits_wake_the_caller(ex: LocalExecutor, tmp_path: Path) -> None:
    woke = threading.Event()
    ex.set_notify(woke.set)
    ex.launch(job("forked", [PY, "-c", "pass"], tmp_path))
    (e,) = wait_exits(ex, 1)
    assert e.returncode == 0 and woke.is_set()
    assert ex._forkserver.proc is not None and ex._forkserver.proc.poll() is None  # one server for all
    assert (ex.root / "forked" / "0" / "0" / state.STATUS).exists()


def test_without_the_fork_server_supervisors_are_new_interpreters(root: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAIRPOD_FORKSERVER", "0")
    with LocalExecutor(root) as plain:
        plain.launch(job("plain", [PY, "-c", "pass"], tmp_path))
        (e,) = wait_exits(plain, 1)
        assert e.returncode == 0 and plain._forkserver.proc is None


def test_a_dead_fork_server_is_replaced(ex: LocalExecutor, tmp_path: Path) -> None:
    ex.launch(job("one", [PY, "-c", "pass"], tmp_path))
    wait_exits(ex, 1)
    first = ex._forkserver.proc
    assert first is not None
    first.kill()
    first.wait(timeout=10)
    ex.launch(job("two", [PY, "-c", "pass"], tmp_path))
    (e,) = wait_exits(ex, 1)
    assert e.returncode == 0 and ex._forkserver.proc is not None and ex._forkserver.proc is not first


def test_forked_supervisors_outlive_the_executor(root: Path, tmp_path: Path) -> None:
    ex = LocalExecutor(root)
    ex.launch(job("long", [PY, "-c", "import time; time.sleep(30)"], tmp_path))
    rdir = root / "long" / "0" / "0"
    wait_for((rdir / state.CHILD_PID).exists)
    server = ex._forkserver.proc
    ex.close()  # the fork server ends at the end of its input; the supervisor and its command go on
    assert server is not None
    server.wait(timeout=10)
    sup = state.read_pid(rdir / state.SUPERVISOR_PID)
    assert sup is not None and procs.alive(*sup) and sup[0] != os.getpid()
    with LocalExecutor(root) as again:
        assert again.running() == {"long": 0}
        again.stop("long", 0, 0.0)
        (e,) = wait_exits(again, 1)
        assert e.reason.startswith("killed")


@pytest.mark.parametrize("bad", ["/bin/false"])
def test_an_unusable_python_falls_back_to_plain_start(root: Path, tmp_path: Path, bad: str) -> None:
    with LocalExecutor(root, python=bad) as broken:
        broken.launch(job("nosup", [PY, "-c", "pass"], tmp_path))
        (e,) = wait_exits(broken, 1, timeout=5)
        assert e.reason.startswith("supervisor failed to start") and broken._forkserver.broken
