"""The life of jobs through a ControlPlane built in-process (real SQLite store, the timed executor, a FAKE
clock): admit -> preempt -> requeue -> resume -> node fault -> recovery, checking the store, the events, the
engine's snapshot and what the executor was asked to start at every step."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import SQLAlchemyError

from fairpod.executors.base import JobLaunch
from fairpod.model.jobs import JobState
from fairpod.model.nodes import NodeHealth
from fairpod.server.api.views import cluster_view
from fairpod.server.core import ControlPlane
from fairpod.server.core.api import Core

from ..inproc import InProc


def in_step(h: InProc) -> None:
    """The engine's snapshot agrees with the store: running jobs, pending jobs, used accelerators."""
    jobs = h.store.list_jobs(finished=False)
    running = {str(j.id) for j in jobs if j.state == JobState.RUNNING}
    pending = {str(j.id) for j in jobs if j.state == JobState.PENDING}
    assert set(h.cp.snap.running) == running
    assert {w.id for t in h.cp.snap.teams.values() for w in t.queue.in_order()} == pending
    for name, node in h.cp.snap.nodes.items():
        on = [j for j in jobs if j.state == JobState.RUNNING and name in j.placement]
        assert node.cap[0] - node.free[0] == sum(j.acc for j in on), name
    for jid, run in h.cp.runs.items():  # slots of live attempts are disjoint and complete
        job = h.store.get_job(jid)
        assert job is not None and job.state in (JobState.RUNNING, JobState.PREEMPTED)
        if run.launched:
            assert all(len(run.slots[n]) == job.acc for n in job.placement)
    used: dict[str, list[int]] = {}
    for run in h.cp.runs.values():
        for n, s in run.slots.items():
            used.setdefault(n, []).extend(s)
    assert all(len(v) == len(set(v)) for v in used.values()), used


def test_admit_preempt_requeue_resume_node_fault(h: InProc) -> None:
    started: list[JobLaunch] = []
    h.before_launch(started.append)

    # admit: john's 3 nodes of quota and 1 borrowed from smith
    for i in range(3):
        h.submit(f"base{i}", "john", 10_000)
    h.submit("v", "john", 300, auto_resume=True, max_retry=2)
    h.turn()
    in_step(h)
    assert all(h.job(n).state == JobState.RUNNING for n in ("base0", "base1", "base2", "v"))
    assert h.kinds("v") == ["JobSubmitted", "JobAdmitted", "JobStarted"]
    john = next(t for t in cluster_view(h.cp)["teams"] if t["team"] == "john")
    assert (john["in_use"], john["borrowed"], john["borrowed_from"]) == (16, 4, {"smith": 4})

    # preempt: smith takes its node back; the borrower stops, the preemptor waits for it
    h.clock.advance(10)
    h.submit("s", "smith", 100)
    h.turn()
    v, s = h.job("v"), h.job("s")
    assert (v.state, v.preemptions) == (JobState.PREEMPTED, 1)
    assert v.reason.startswith("reclaimed by team smith")
    assert s.state == JobState.RUNNING and s.placement == v.placement and len(started) == 4  # s not started yet
    in_step(h)

    # requeue: the victim's exit arrives; it is Pending at its place, s starts on the whole node
    h.turn()
    v, s = h.job("v"), h.job("s")
    assert v.state == JobState.PENDING and "(requeued: reclaimed by team smith" in v.reason
    assert [e.kind for e in h.events(v) if e.kind != "Goodput"][-2:] == ["JobPreempted", "JobRequeued"]
    assert started[-1].job == f"s-{s.id}" and sorted(started[-1].replicas[0].accelerators) == [0, 1, 2, 3]
    in_step(h)

    # resume: s ends, v runs again (same attempt: a preemption is no failure)
    h.clock.advance(101)
    h.turn(2)
    v = h.job("v")
    assert h.job("s").state == JobState.SUCCEEDED and v.state == JobState.RUNNING
    assert (v.attempt, v.preemptions) == (0, 1) and started[-1].job == f"v-{v.id}"
    assert [e.kind for e in h.events(v)].count("JobStarted") == 2
    in_step(h)

    # node fault: v (auto-resume) restarts with one more attempt; base jobs elsewhere keep running
    node = v.placement[0]
    stopped = h.cp.node_fault(node, "XID", "GPU fell off the bus", "reboot")
    assert stopped == [v.id]
    assert h.store.get_node(node).health_status == NodeHealth.PENDING_REBOOT
    assert not h.cp.snap.nodes[node].schedulable
    h.turn()
    v = h.job("v")
    assert (v.state, v.attempt) == (JobState.PENDING, 1)  # no healthy node free for it
    assert [e.kind for e in h.events(v) if e.kind != "Goodput"][-1] == "JobRestarting"  # Goodput: work lost
    assert h.events(v)[-1].message == (f"job v: node {node} fault: XID: GPU fell off the bus (restart 1 of 2)")
    in_step(h)

    # recovery: the node is back, v starts its attempt 1 there
    h.cp.node_recovered(node)
    h.turn()
    v = h.job("v")
    assert (v.state, v.attempt) == (JobState.RUNNING, 1) and started[-1].attempt == 1
    in_step(h)

    # a job without auto-resume on a faulty node fails with the fault as its reason
    base = h.job("base0")
    h.cp.node_fault(base.placement[0], "XID", "uncorrectable ECC", "replace")
    h.turn()
    base = h.job("base0")
    assert base.state == JobState.FAILED and "uncorrectable ECC" in base.reason
    in_step(h)
    assert all(h.job(n).state == JobState.RUNNING for n in ("base1", "base2"))


def test_a_failed_store_write_puts_the_memory_back_to_the_store(h: InProc) -> None:
    h.submit("a", "john", 100)
    h.turn()
    before = (dict(h.cp.snap.running), {k: v.to_json() for k, v in h.cp.runs.items()})
    disk_full = h.fail_writes()
    with pytest.raises(SQLAlchemyError, match="disk is full"):
        h.cp.cancel(h.job("a"), "tester")  # begin-stop cannot be stored
    disk_full()
    assert h.job("a").state == JobState.RUNNING
    assert (set(h.cp.snap.running), {k: v.to_json() for k, v in h.cp.runs.items()}) == (
        set(before[0]), before[1])  # the memory says what the store says: not stopping
    in_step(h)
    h.cp.cancel(h.job("a"), "tester")
    h.turn()
    assert h.job("a").state == JobState.CANCELLED


# -- the tests once in test_core_api.py (merged here):
# ControlPlane names the Core protocol among its bases, and implements every method Core lists (none is left
# to the protocol's empty body).
def test_the_control_plane_implements_core_explicitly() -> None:
    assert Core in ControlPlane.__mro__
    methods = [n for n, v in vars(Core).items() if callable(v) and not n.startswith("__")]
    assert "set_labels" in methods and "check_failed" in methods
    left = [n for n in methods if next(c for c in ControlPlane.__mro__ if n in vars(c)) is Core]
    assert left == []
