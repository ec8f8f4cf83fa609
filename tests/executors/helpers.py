"""Helpers for executor tests: real processes, bounded waits, clean-up by PID only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from fairpod.executors import JobLaunch, LocalExecutor, ReplicaExit, ReplicaLaunch, procs, state

PY = sys.executable


def wait_for(pred: Callable[[], object], timeout: float = 10.0, step: float = 0.05) -> None:
    """Wait until ``pred()`` is truthy: at most ``timeout`` seconds and ``timeout / step + 1`` tries."""
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / step) + 1):
        if pred():
            return
        if time.monotonic() > deadline:
            break
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {pred}")


def wait_exits(ex: LocalExecutor, n: int, timeout: float = 15.0) -> list[ReplicaExit]:
    """Poll until ``n`` exits have been reported (bounded in time and tries); exactly ``n`` expected."""
    got: list[ReplicaExit] = []

    def enough() -> bool:
        got.extend(ex.poll())
        return len(got) >= n

    wait_for(enough, timeout)
    assert len(got) == n, got
    return got


def gone(pid: int) -> bool:
    """True when no live (non-zombie) process has this PID."""
    return procs.start_time(pid) is None


def job(name: str, command: list[str], tmp: Path, *, n: int = 1, attempt: int = 0, **kw: object) -> JobLaunch:
    reps = tuple(ReplicaLaunch(rank=i, node=f"node-{i}") for i in range(n))
    return JobLaunch(
        job=name,
        team="team-a",
        attempt=attempt,
        command=command,
        checkpoint_dir=str(tmp / "ckpt" / name),
        replicas=reps,
        **kw,  # type: ignore[arg-type]
    )


def kill_recorded(root: Path) -> None:
    """SIGKILL every supervisor and command recorded under ``root`` that still runs (by PID and start time)."""
    for name in (state.CHILD_PID, state.SUPERVISOR_PID):
        for f in root.glob(f"*/*/*/{name}"):
            rec = state.read_pid(f)
            if rec is None or not procs.alive(*rec):
                continue
            if name == state.CHILD_PID:
                procs.signal_group(rec[0], signal.SIGKILL)
            procs.signal_all([rec[0]], signal.SIGKILL)


def stop_runs(root: Path) -> None:
    """Stop every replica and supervisor recorded under a local executor's runs directory ``root`` that still runs
    (by PID and start time: a replica that ended long ago left its PID file, and its PID may be another test's
    process by now; PIDs wrap, 32,768 on some hosts, and a run starts tens of thousands), and remove their cgroups
    (a supervisor killed so leaves its replica's, and its spares')."""
    from .. import reaper

    kill_recorded(root)
    reaper.discard_runs(root)


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


def stop_groups(ps: list[subprocess.Popen[bytes]], grace: float = 60.0) -> None:
    """SIGTERM to the process groups of ``ps`` (each started in a session of its own), then wait for each: SIGKILL
    to the group of one still running after ``grace`` seconds."""
    for p in ps:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in ps:
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)


def alive_nodes(gcs: str) -> list[tuple[bool, int, float]]:
    """The Ray nodes ALIVE in the head's table at ``gcs``: (head?, raylet port, start time in s)."""
    from ray._raylet import GcsClient

    try:
        infos = GcsClient(address=gcs).get_all_node_info(timeout=5)
    except Exception:  # noqa: BLE001 - the GCS not up yet
        return []
    return [(i.is_head_node, i.node_manager_port, i.start_time_ms / 1000) for i in infos.values() if i.state == 0]
