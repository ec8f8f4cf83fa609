"""The reconcile turn starts processes without holding the control plane's lock, and takes the lock ahead of
waiting submits. In-process (``inproc``): real SQLite, the timed executor, a FAKE clock; the executor's
``launch`` is wrapped so that other threads act while an attempt's processes are being started."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairpod.executors.base import JobLaunch
from fairpod.model.jobs import JobState
from fairpod.server.core.transitions import admit as admission
from fairpod.server.core.turn_gate import TurnGate
from fairpod.server.core.turns import TurnPace
from fairpod.server.runs import STOP_CANCEL, job_key

from ..inproc import InProc


def during_launch(h: InProc, action: Any) -> list[Any]:
    """While the executor starts an attempt, run ``action()`` in another thread and wait for it (5 s at most);
    what it returned is collected (nothing when it could not run meanwhile)."""
    out: list[Any] = []

    def run_action(_: JobLaunch) -> None:
        t = threading.Thread(target=lambda: out.append(action()), daemon=True)
        t.start()
        t.join(timeout=5)

    h.before_launch(run_action)
    return out


def test_submits_go_on_while_processes_start(h: InProc) -> None:
    h.submit("a", "john", 60)
    done = during_launch(h, lambda: h.submit("b", "john", 60))
    h.turn()
    assert [j.name for j in done] == ["b"]  # submitted while "a" was being started: the lock was free
    assert h.job("a").state == JobState.RUNNING and h.kinds("a").count("JobStarted") == 1
    assert h.job("b").state == JobState.PENDING and str(h.job("b").id) in h.cp.snap.pending


def test_a_cancel_while_its_processes_start_waits_for_their_exit(h: InProc) -> None:
    job = h.submit("j", "john", 60)
    done = during_launch(h, lambda: h.cp.cancel(h.job("j"), "tester"))
    h.turn()
    assert len(done) == 1, "the cancel could not run while the processes started"
    run = h.cp.runs[job.id]
    # the replicas exist: the job is stopping, its accelerator slots stay taken until they have exited
    assert run.launched and run.stopping == STOP_CANCEL and h.job("j").state == JobState.RUNNING
    assert any(h.cp.slots.used.get(n) for n in run.slots)
    assert "JobStarted" in h.kinds("j")
    assert job_key(h.job("j")) not in h.executor.running()  # the stop was sent again once they existed
    h.turn()
    j = h.job("j")
    assert (j.state, j.reason) == (JobState.CANCELLED, "cancelled by tester")
    assert job.id not in h.cp.runs and not any(h.cp.slots.used.values())


def test_a_failed_launch_fails_the_job_and_frees_its_slots(h: InProc) -> None:
    from fairpod.executors.base import ExecutorError

    def launch(job: JobLaunch) -> None:
        raise ExecutorError("no such command")

    h.executor.launch = launch  # type: ignore[method-assign]
    job = h.submit("j", "john", 60)
    h.turn()
    j = h.job("j")
    assert (j.state, j.reason) == (JobState.FAILED, "could not start: no such command")
    assert job.id not in h.cp.runs and not any(h.cp.slots.used.values())


def test_the_turn_goes_first_at_the_gate() -> None:
    gate, order = TurnGate(), []
    with gate.turn():
        t = threading.Thread(target=lambda: (gate.yield_to_turn(5.0), order.append("submit")), daemon=True)
        t.start()
        time.sleep(0.2)
        order.append("turn")
    t.join(timeout=5)
    assert order == ["turn", "submit"]


def test_the_gate_never_holds_a_submit_longer_than_its_bound() -> None:
    gate = TurnGate()
    with gate.turn():
        t0 = time.monotonic()
        gate.yield_to_turn(0.1)
        assert 0.05 < time.monotonic() - t0 < 2.0
    t0 = time.monotonic()
    gate.yield_to_turn(5.0)  # no turn waiting: no wait
    assert time.monotonic() - t0 < 0.5


# -- the tests once in test_net_changes_live.py (merged here):
# The control plane applies a cycle's net changes (governance.net_changes), as the simulator does: a job the
# engine admits and takes back within one cycle never starts, is never preempted, and keeps waiting.
P4D = "ml.p4d.24xlarge"


def test_a_job_admitted_and_displaced_in_one_cycle_is_never_started_nor_preempted(tmp_path: Path):
    # issue #14's small case: one p4d; l lends 2 accelerators, x (quota 2, weight 1) and y (quota 1, weight 10)
    # borrow. At t=10 the engine admits x4 on the last idle accelerator and takes it back in the same cycle.
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "cluster": {"name": "t", "instance_groups": [{"name": "p4d", "instance_type": P4D, "count": 1}]},
        "policy": {},
        "teams": [{"name": n, "fair_share_weight": w, "sharing": {"strategy": "LendAndBorrow", "borrow_limit": b},
                   "quota": [{"instance_type": P4D, "accelerators": q}]}
                  for n, q, w, b in (("l", 2, 10, 100), ("x", 2, 1, 200), ("y", 1, 10, 500))],
    }))
    ip = InProc(tmp_path, spec)
    ip.clock.now = time.time()  # the store stamps submissions with the real clock: the FAKE one starts there
    for name in ("x1", "x2", "x3"):
        ip.submit(name, "x", 1000, accelerators=1)
    ip.submit("y1", "y", 1000, accelerators=1)
    ip.turn()
    ip.clock.advance(10)
    ip.submit("x4", "x", 1000, accelerators=1)
    ip.submit("y2", "y", 1000, accelerators=4)
    ip.submit("y3", "y", 1000, accelerators=1)
    ip.turn(3)
    x4 = ip.job("x4")
    kinds = [e.kind for e in ip.events(x4)]
    assert x4.state.value == "Pending" and x4.preemptions == 0 and x4.first_started_at is None, (x4, kinds)
    assert "JobAdmitted" not in kinds and "JobPreempted" not in kinds and "JobStarted" not in kinds
    assert ip.job("y3").state.value == "Running"  # the job it was given up for did start
    assert "given up again in the same cycle to job" in x4.reason or "no idle" in x4.reason, x4.reason
    ip.close()


# -- the pace of woken turns (fairpod.server.core.turns.TurnPace): a burst of submits is taken in by one turn


def test_a_woken_turn_waits_as_long_as_the_last_turn_lasted_and_no_longer_than_the_bound() -> None:
    now = [100.0]
    pace = TurnPace(clock=lambda: now[0], max_pause=1.0)
    assert pace.pause() == 0.0  # no turn yet
    pace.ran(100.0, 100.2)  # a turn of 0.2 s
    now[0] = 100.2
    assert pace.pause() == pytest.approx(0.2)
    now[0] = 100.35
    assert pace.pause() == pytest.approx(0.05)
    now[0] = 100.5  # idle longer than the turn lasted: no wait
    assert pace.pause() == 0.0
    pace.ran(100.5, 105.5)  # a 5 s turn: the pause is bounded
    now[0] = 105.5
    assert pace.pause() == pytest.approx(1.0)
    stop = threading.Event()
    stop.set()
    assert pace.wait(stop) is True  # a stop ends the wait


class HeldPace(TurnPace):
    """A pace the test holds shut (at most 20 s) until it lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()
        self.go = threading.Event()

    def wait(self, stop: threading.Event) -> bool:
        if not self.go.is_set():
            self.waiting.set()
            self.go.wait(20)
        return stop.is_set()


def test_submits_that_arrive_while_the_loop_waits_for_its_pace_start_in_one_turn(
        h: InProc, monkeypatch: pytest.MonkeyPatch) -> None:
    h.cp.pace = pace = HeldPace()
    cycles: list[int] = []
    admit = admission.admit
    monkeypatch.setattr(admission, "admit", lambda cp, d: (cycles.append(h.cp.cycles), admit(cp, d))[1])
    h.cp.start(interval=0.05)
    try:
        assert pace.waiting.wait(20), "the loop never asked the pace"
        for i in range(8):  # each submit wakes the loop
            h.submit(f"j{i}", "john", 60, accelerators=1)
        assert cycles == []  # nothing started while the pace held the turn
        pace.go.set()
        deadline = time.monotonic() + 20
        while len(cycles) < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        h.cp.stop()
    assert len(cycles) == 8 and len(set(cycles)) == 1, cycles  # all eight admitted by one engine cycle
