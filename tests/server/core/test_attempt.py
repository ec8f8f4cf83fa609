"""The crash and preemption defects of the control plane's transitions, each reproduced in-process: a real
SQLite store, a control plane built in the test, the timed executor (no processes) and a FAKE clock; a
"crash" is an exception raised from the store write that ends the control plane there, after which a new
control plane is built on the same store and executor (as ``fairpod up`` after kill -9 adopts the replicas)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fairpod.executors.base import JobLaunch, ReplicaExit
from fairpod.governance import Preempt
from fairpod.model.jobs import JobState
from fairpod.server.core import ControlPlane
from fairpod.server.core.transitions import admit as admission
from fairpod.server.runs import Slots, SlotsBusy
from fairpod.server.runtime.wiring import control_plane

from ..inproc import InProc


class Crash(BaseException):
    """The control plane process dies here (nothing after this point happens)."""


def crash_on_commit(h: InProc, when: Any = lambda: True) -> None:
    """The control plane dies (``Crash``) at its next write to the database while ``when()`` holds: the
    transaction it was in is never committed."""
    h.fail_writes(when, Crash)


def restart(h: InProc) -> ControlPlane:
    """A new control plane on the same store and executor (the old one is dead: never used again)."""
    h.heal()
    h.cp = control_plane(h.store, h.executor, h.tmp, clock=h.clock)
    return h.cp


def launches(h: InProc) -> list[JobLaunch]:
    seen: list[JobLaunch] = []
    h.before_launch(seen.append)
    return seen


def test_an_exit_taken_before_a_crash_is_not_lost(h: InProc) -> None:
    h.submit("j", "john", 5)
    h.turn()
    assert h.job("j").state == JobState.RUNNING and h.kinds("j").count("JobStarted") == 1
    h.clock.advance(6)  # the replica exits 0; the next turn takes the exit, then dies before its commit
    crash_on_commit(h)
    with pytest.raises(Crash):
        h.turn()
    assert h.job("j").state == JobState.RUNNING  # nothing of the exit reached the store
    restart(h)
    j = h.job("j")
    assert (j.state, j.reason) == (JobState.SUCCEEDED, "all replicas exited 0")
    assert h.kinds("j").count("JobStarted") == 1
    h.clock.advance(1)
    h.turn(2)
    assert h.executor.poll() == []  # acknowledged once stored: not delivered again


def test_an_exit_is_acknowledged_only_after_its_commit(h: InProc) -> None:
    h.submit("j", "john", 5)
    h.turn()
    h.clock.advance(6)
    acked: list[Any] = []
    real = h.executor.ack
    h.executor.ack = lambda exits: (acked.append((list(exits), h.job("j").state)), real(exits))  # type: ignore
    h.turn()
    assert [(len(x), st) for x, st in acked if x] == [(1, JobState.SUCCEEDED)]


def test_a_preemptor_never_starts_with_fewer_accelerator_slots_than_it_asks(h: InProc) -> None:
    for i in range(4):  # john fills the cluster: 3 nodes of quota and 1 borrowed from smith
        h.submit(f"j{i}", "john", 100)
    h.turn()
    seen = launches(h)
    h.submit("s", "smith", 100)  # reclaims smith's node: a john job is preempted, s waits for it
    for _ in range(4):
        h.clock.advance(1)
        h.turn()
    assert h.job("s").state == JobState.RUNNING and [j.job for j in seen] == [f"s-{h.job('s').id}"]
    (rep,) = seen[0].replicas
    assert sorted(rep.accelerators) == [0, 1, 2, 3]  # the whole node, freed by the victim first
    victim = next(j for j in h.store.list_jobs() if j.name != "s" and j.state == JobState.PENDING)
    assert victim.preemptions == 1 and h.kinds(victim.name).count("JobPreempted") == 1


def test_the_slot_allocator_gives_all_or_nothing() -> None:
    s = Slots()
    s.mark("n", [0, 1])
    with pytest.raises(SlotsBusy, match="2 of 4 accelerator slots free, 3 asked"):
        s.take("n", 3, 4)
    with pytest.raises(SlotsBusy):
        s.take_all(["m", "n"], 3, 4)
    assert s.free("m", 4) == [0, 1, 2, 3] and s.free("n", 4) == [2, 3]  # nothing kept of a failed take_all
    assert s.take_all(["m", "n"], 2, 4) == {"m": [0, 1], "n": [2, 3]}


def test_a_job_that_finished_while_the_engine_decided_is_not_preempted_and_run_again(h: InProc) -> None:
    for i in range(3):
        h.submit(f"j{i}", "john", 1000)
    h.submit("last", "john", 10)  # borrows smith's node; ends at t+10
    h.turn()
    seen = launches(h)
    h.clock.advance(9.5)
    real = h.executor.poll
    polls = 0

    def poll(**kw: Any) -> Any:  # the replica ends right after the turn's first look at the exits
        nonlocal polls
        polls += 1
        out = real(**kw)
        if polls == 1:
            h.clock.advance(1)
        return out

    h.executor.poll = poll  # type: ignore[method-assign]
    h.submit("s", "smith", 100)  # the engine would reclaim smith's node from 'last'
    h.turn()
    h.executor.poll = real  # type: ignore[method-assign]
    h.clock.advance(1)
    h.turn(2)
    last = h.job("last")
    assert (last.state, last.preemptions) == (JobState.SUCCEEDED, 0), (last, h.kinds("last"))
    assert "JobPreempted" not in h.kinds("last") and h.kinds("last").count("JobStarted") == 1
    assert [j.job for j in seen] == [f"s-{h.job('s').id}"]  # 'last' never ran again
    assert sorted(seen[0].replicas[0].accelerators) == [0, 1, 2, 3]


def test_a_replica_that_ended_on_its_own_before_the_stop_decides(h: InProc) -> None:
    h.submit("j", "john", 5)
    h.turn()
    h.clock.advance(10)  # it ended at t+5, nobody has taken the exit yet
    jid = h.job("j").id
    admission.preempt(h.cp, Preempt(str(jid), "0", "priority", "preempted by a test"))
    h.turn(2)
    j = h.job("j")
    assert (j.state, j.reason) == (JobState.SUCCEEDED, "all replicas exited 0")


def test_one_stop_is_one_preemption(h: InProc) -> None:
    h.submit("j", "john", 100, termination_grace_seconds=30)
    h.turn()
    jid = str(h.job("j").id)
    stop_calls: list[str] = []
    real = h.executor.stop
    h.executor.stop = lambda job, attempt, grace: (stop_calls.append(job), real(job, attempt, grace))  # type: ignore
    admission.preempt(h.cp, Preempt(jid, "0", "priority", "preempted by a test"))
    admission.preempt(h.cp, Preempt(jid, "0", "priority", "preempted by a test"))  # a second decision for the same stop
    assert h.job("j").preemptions == 1 and h.kinds("j").count("JobPreempted") == 1 and len(stop_calls) == 1
    h.turn()  # stopped, requeued (and admitted again: it is alone)
    assert h.kinds("j").count("JobRequeued") == 1 and h.job("j").preemptions == 1


def test_job_started_is_recorded_when_the_crash_falls_between_launch_and_its_event(h: InProc) -> None:
    launched = launches(h)
    h.submit("j", "john", 100)
    crash_on_commit(h, lambda: bool(launched))  # the replicas exist; the commit after the launch dies
    with pytest.raises(Crash):
        h.turn()
    assert len(launched) == 1 and "JobStarted" not in h.kinds("j")
    restart(h)
    assert h.kinds("j").count("JobStarted") == 1 and h.job("j").state == JobState.RUNNING
    h.turn()
    assert len(launched) == 1  # adopted, not started again
    h.clock.advance(101)
    h.turn(2)
    assert h.job("j").state == JobState.SUCCEEDED and h.kinds("j").count("JobStarted") == 1


def test_a_replica_whose_launch_never_reached_its_node_queues_the_job_again(h: InProc) -> None:
    """A replica whose start never reached its node (the control plane that sent it died first; the Ray
    executor says so at adoption, ``started=False``) never ran: the job is not failed (no retries here) but
    goes back to its queue with the same attempt, and runs again."""
    launched = launches(h)
    h.submit("j", "john", 5)
    h.turn()
    j = h.job("j")
    assert j.state == JobState.RUNNING and len(launched) == 1
    key = launched[0].job
    h.executor.stop(key, j.attempt, 0.0)  # the executor has no replica any more; its exit says it never started
    real = h.executor.poll

    def poll(ack: bool = True) -> list[ReplicaExit]:
        return [replace(e, returncode=None, signal=None, started=False, reason="never started: its start did "
                        "not reach the fairpod agent on node w1") if e.reason == "killed by SIGTERM" else e
                for e in real(ack=ack)]

    h.executor.poll = poll  # type: ignore[method-assign]
    h.turn()  # the exit: the attempt is stopped and the job queued again
    assert h.kinds("j").count("JobRequeued") == 1, h.kinds("j")
    assert "JobFailed" not in h.kinds("j") and "JobRestarting" not in h.kinds("j")
    h.turn(2)
    j = h.job("j")
    assert (j.state, j.attempt, j.preemptions) == (JobState.RUNNING, 0, 0), (j.state, j.reason)
    assert len(launched) == 2  # started again
    h.clock.advance(6)
    h.turn(2)
    assert h.job("j").state == JobState.SUCCEEDED


# -- the tests once in test_build_launch.py (merged here):
# One ``build_launch`` for a first launch and for the new ranks of a job that grew: the same command, env,
# checkpoint directory and replicas, only fewer of them (in-process: the timed executor, a FAKE clock).
def test_the_new_ranks_of_a_growth_get_the_launch_a_first_start_gets(tmp_path: Path) -> None:
    h = InProc(tmp_path)
    seen: list[JobLaunch] = []
    h.before_launch(seen.append)
    h.submit("ddp", "john", 600, nodes=3, accelerators=2, env={"A": "1"})
    h.turn(2)
    job = h.job("ddp")
    assert job.state == JobState.RUNNING and len(seen) == 1
    first = seen[0]
    assert [r.rank for r in first.replicas] == [0, 1, 2] and first.world_size == 3 and first.world == 0
    with h.cp.lock:
        grow = h.cp.build_launch(job, h.cp.runs[job.id], [1, 2])
    assert grow.replicas == first.replicas[1:]
    assert grow.world == 3 and grow.world_size == 3
    same = ("job", "team", "attempt", "command", "checkpoint_dir", "env", "workdir", "grace_seconds", "run_as")
    assert {k: getattr(grow, k) for k in same} == {k: getattr(first, k) for k in same}
    assert first.env["A"] == "1" and first.checkpoint_dir.endswith(f"/john/ddp-{job.id}")
