"""A cancel always wins: swept over every point of an auto-resume job's restart path (a replica exits 1, the
others are stopped, the job backs off, is admitted again, its next attempt is launched), and at the moments
inside the loop's own steps (while the executor is asked to stop the attempt, while it launches the next one).
Wherever the cancel lands, it is stored at once (the answer says so), the job ends Cancelled, nothing of it is
restarted or started after it, and its replicas are all stopped. In-process: a real SQLite store, the timed
executor, a FAKE clock."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fairpod.executors.base import ReplicaExit
from fairpod.model.jobs import JobState
from fairpod.store.records import Job

from ..inproc import InProc


class Path_:
    """The restart path of job ``flaky`` (2 replicas, auto-resume), step by step; ``cancel_at`` names where the
    cancel comes."""

    def __init__(self, tmp: Path) -> None:
        self.h = InProc(tmp)
        self.inject: list[ReplicaExit] = []
        self.hooks: dict[str, Callable[[], None]] = {}
        self.answer: Job | None = None
        self.cancelled_at: float | None = None
        self.seen = 0  # the job's events before the cancel
        ex = self.h.executor
        real_poll, real_stop = ex.poll, ex.stop

        def poll(*, ack: bool = True) -> list[ReplicaExit]:
            out = real_poll(ack=ack)
            out += self.inject
            self.inject = []
            return out

        def stop(job: str, attempt: int, grace: float) -> None:
            if (hook := self.hooks.pop("stop", None)) is not None:
                hook()
            real_stop(job, attempt, grace)

        ex.poll = poll  # type: ignore[method-assign]
        ex.stop = stop  # type: ignore[method-assign]
        self.h.before_launch(lambda launch: (hook := self.hooks.pop(f"launch{launch.attempt}", None)) and hook())

    def cancel(self) -> None:
        self.cancelled_at = self.h.clock.now
        self.seen = len(self.h.events(self.h.job("flaky")))
        self.answer = self.h.cp.cancel(self.h.job("flaky"), "alice")

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        h = self.h

        def submit() -> None:
            h.submit("flaky", "smith", 1000, nodes=2, auto_resume=True, max_retry=3)
            h.turn()
            assert h.job("flaky").state == JobState.RUNNING

        def exit_1() -> None:  # replica 0 fails; the turn stops replica 1 for the restart
            j = h.job("flaky")
            h.clock.advance(5)
            self.inject.append(ReplicaExit(job=f"flaky-{j.id}", attempt=j.attempt, rank=0, returncode=1,
                                           signal=None, reason="exited 1", ended_at=h.clock.now))
            h.turn()

        def stopped() -> None:  # replica 1's stop is taken: Pending, backing off
            h.turn()

        def backoff_over() -> None:
            h.clock.advance(60)

        def relaunch() -> None:
            h.turn(2)

        return [("submit", submit), ("exit 1", exit_1), ("stopped", stopped), ("backoff over", backoff_over),
                ("relaunch", relaunch)]


POINTS = ["after submit", "after exit 1", "after stopped", "after backoff over", "after relaunch",
          "inside the stop of attempt 0", "inside the launch of attempt 1", "inside the launch of attempt 0"]


@pytest.mark.parametrize("point", POINTS)
def test_a_cancel_wins_at_every_point_of_the_restart_path(tmp_path: Path, point: str):
    p = Path_(tmp_path)
    h = p.h
    try:
        if point == "inside the stop of attempt 0":
            p.hooks["stop"] = p.cancel
        elif point.startswith("inside the launch of attempt "):
            p.hooks["launch" + point[-1]] = p.cancel
        for name, step in p.steps():
            if p.cancelled_at is not None and name == "submit":
                raise AssertionError("cancelled before the job existed")
            try:
                step()
            except AssertionError:
                if p.cancelled_at is None:
                    raise
            if point == f"after {name}":
                p.cancel()
            if p.cancelled_at is not None and name != "submit":
                break
        for _ in range(10):  # whatever was under way ends
            h.clock.advance(100)
            h.turn()
        assert p.cancelled_at is not None, "the cancel never came"
        assert p.answer is not None and (p.answer.state == JobState.CANCELLED or
                                         (p.answer.reason or "").startswith("cancelled by alice")), \
            (p.answer.state, p.answer.reason)
        job = h.job("flaky")
        assert job.state == JobState.CANCELLED and job.reason == "cancelled by alice", (job.state, job.reason)
        evs = sorted(h.events(job), key=lambda e: e.id)
        after = [e.kind for e in evs[p.seen:]]
        assert not {"JobRestarting", "JobAdmitted", "ReplicaRestarted"} & set(after), after
        if not point.startswith("inside the launch"):  # (a launch under way is recorded, and stopped at once)
            assert "JobStarted" not in after, after
        assert after[-1] == "JobCancelled", after
        if p.answer.state != JobState.CANCELLED:  # it had replicas to stop: they are stopping for the cancel
            assert after[0] == "JobCancelling", after
        assert h.executor.running() == {}, h.executor.running()
    finally:
        h.close()
