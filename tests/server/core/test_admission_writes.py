"""An admission stores its run once per commit: the turn that admits jobs and takes their slots serializes
and writes each job's ``run_state`` once (it saved the run twice: admitted, then with its slots), and what is
committed is what it was, so a crash at that commit or right after it is recovered as before."""

from __future__ import annotations

from typing import Any

import pytest

from fairpod.model.jobs import JobState
from fairpod.server import runs
from fairpod.server.runs import Run

from ..inproc import InProc
from .test_attempt import Crash, crash_on_commit, restart


class Serialized:
    """Counts ``Run.to_json`` (a run_state written to the store), calling the real one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        real = Run.to_json

        def counted(run: Run) -> dict[str, Any]:
            self.n += 1
            return real(run)

        monkeypatch.setattr(runs.Run, "to_json", counted)


def test_a_turn_writes_each_admitted_run_once_per_commit(h: InProc, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(4):
        h.submit(f"j{i}", "john", 60)
    seen = Serialized(monkeypatch)
    commits: list[int] = []
    real_flush = h.cp.store.flush

    def flush() -> None:  # the turn's commits: how many runs were serialized by each
        before = seen.n
        real_flush()
        commits.append(seen.n - before)

    monkeypatch.setattr(h.cp.store, "flush", flush)
    h.turn()
    jobs = [h.job(f"j{i}") for i in range(4)]
    assert all(j.state == JobState.RUNNING and j.run_state and j.run_state["launched"] for j in jobs)
    assert all(j.run_state["slots"] for j in jobs)
    assert seen.n == 8, f"{seen.n} runs serialized for 4 admissions"  # one a commit, not three
    # the admissions' commit (state, placement, slots: 4 runs), then the starts' commit (4 runs)
    assert [c for c in commits if c] == [4, 4], commits


def test_a_crash_at_the_admissions_commit_leaves_them_pending_and_they_start_once(h: InProc) -> None:
    h.submit("a", "john", 60)
    crash_on_commit(h)
    with pytest.raises(Crash):
        h.turn()
    assert h.job("a").state == JobState.PENDING
    restart(h)
    h.turn()
    a = h.job("a")
    assert a.state == JobState.RUNNING and a.run_state and a.run_state["launched"] and a.run_state["slots"]
    assert h.kinds("a").count("JobStarted") == 1 and h.kinds("a").count("JobAdmitted") == 1
