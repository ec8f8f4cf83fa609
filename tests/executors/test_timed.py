"""The timed executor (benchmarks and tests only): no processes, each replica lasts the job's duration."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fairpod.executors import Executor, ExecutorError
from fairpod.executors.timed import TimedExecutor, job_duration

from .helpers import job


def test_duration_from_env_or_sleep_command(tmp_path: Path):
    assert job_duration(job("a", ["sleep", "0.5"], tmp_path)) == 0.5
    assert job_duration(job("a", ["sh", "-c", "sleep 2"], tmp_path)) == 2.0
    assert job_duration(job("a", ["true"], tmp_path)) == 0.0
    assert job_duration(job("a", ["sleep", "9"], tmp_path, env={"FAIRPOD_BENCH_DURATION": "0.25"})) == 0.25
    with pytest.raises(ExecutorError):
        job_duration(job("a", ["true"], tmp_path, env={"FAIRPOD_BENCH_DURATION": "soon"}))


def test_replicas_end_after_their_duration(tmp_path: Path):
    now = [100.0]
    ex = TimedExecutor(clock=lambda: now[0])
    assert isinstance(ex, Executor)
    ex.launch(job("a", ["sleep", "2"], tmp_path, n=2))
    assert ex.running() == {"a": 0} and ex.poll() == []
    with pytest.raises(ExecutorError, match="still running"):
        ex.launch(job("a", ["sleep", "2"], tmp_path))
    now[0] = 102.0
    exits = ex.poll()
    assert sorted((e.job, e.rank, e.returncode, e.reason, e.ended_at) for e in exits) == [
        ("a", 0, 0, "exited 0", 102.0), ("a", 1, 0, "exited 0", 102.0)]  # fmt: skip
    assert ex.running() == {} and ex.poll() == [] and ex.log_path("a") is None and ex.adopt() == []


def test_stop_ends_replicas_at_once(tmp_path: Path):
    ex = TimedExecutor()
    ex.launch(job("a", ["sleep", "60"], tmp_path))
    ex.stop("a", 0, 30.0)
    (e,) = ex.poll()
    assert (e.returncode, e.reason) == (None, "killed by SIGTERM")
    assert ex.running() == {}
    ex.launch(job("a", ["sleep", "60"], tmp_path, attempt=1))  # may run again
    assert ex.running() == {"a": 1}


def test_notify_when_an_exit_is_due(tmp_path: Path):
    ex = TimedExecutor()
    woke = threading.Event()
    ex.set_notify(woke.set)
    try:
        t0 = time.monotonic()
        ex.launch(job("a", ["sleep", "0.2"], tmp_path))
        assert woke.wait(5)
        assert time.monotonic() - t0 >= 0.19
        assert [e.job for e in ex.poll()] == ["a"]
    finally:
        ex.close()
