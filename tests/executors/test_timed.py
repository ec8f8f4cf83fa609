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


def test_a_new_executor_on_the_same_root_adopts_what_the_journal_holds(tmp_path: Path):
    """As after kill -9 of the control plane: live replicas go on to their due time, exits not acknowledged are
    reported again (stopped ones as killed), acknowledged ones never again; a cut-short last line is skipped."""
    now = [100.0]
    root = tmp_path / "runs"
    ex = TimedExecutor(root, clock=lambda: now[0])
    ex.launch(job("long", ["sleep", "50"], tmp_path, n=2))
    ex.launch(job("short", ["sleep", "5"], tmp_path))
    ex.launch(job("stopped", ["sleep", "50"], tmp_path))
    ex.launch(job("acked", ["sleep", "1"], tmp_path))
    now[0] = 110.0
    ex.stop("stopped", 0, 30.0)
    exits = ex.poll(ack=False)
    assert sorted(e.job for e in exits) == ["acked", "short", "stopped"]
    ex.ack([e for e in exits if e.job == "acked"])
    with open(root / "timed.journal", "a") as f:
        f.write("L 1")  # a write cut short by the kill
    again = TimedExecutor(root, clock=lambda: now[0])  # the old one is never closed: it was killed
    assert again.running() == {"long": 0}
    got = {e.job: (e.returncode, e.signal, e.reason, e.ended_at) for e in again.adopt(ack=False)}
    assert got == {"short": (0, None, "exited 0", 105.0), "stopped": (None, 15, "killed by SIGTERM", 110.0)}
    again.ack(again.poll())
    now[0] = 150.0
    assert sorted((e.job, e.rank, e.ended_at) for e in again.poll(ack=False)) == [("long", 0, 150.0), ("long", 1, 150.0)]
    assert again.running() == {}
    third = TimedExecutor(root, clock=lambda: now[0])  # "long" was polled but not acknowledged
    assert [e.job for e in third.adopt()] == ["long", "long"] and third.running() == {}
    assert TimedExecutor(root, clock=lambda: now[0]).adopt() == []  # acknowledged by adopt(ack=True)
    assert (root / "timed.journal").read_text() == ""


def test_the_journal_is_rewritten_once_it_has_grown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import fairpod.executors.timed as timed

    monkeypatch.setattr(timed, "COMPACT_MIN", 20)
    now = [0.0]
    root = tmp_path / "runs"
    ex = TimedExecutor(root, clock=lambda: now[0])
    ex.launch(job("keeps", ["sleep", "1000"], tmp_path))
    for i in range(30):
        ex.launch(job(f"j{i}", ["sleep", "1"], tmp_path))
        now[0] += 1
        ex.ack(ex.poll())
    lines = (root / "timed.journal").read_text().splitlines()
    assert len(lines) <= 20 and lines[0] == "L 1000.0 0 0 keeps", lines
    assert TimedExecutor(root, clock=lambda: now[0]).running() == {"keeps": 0}
