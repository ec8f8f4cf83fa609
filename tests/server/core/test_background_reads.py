"""The control plane's background loops read from the store what they may act on, not the whole cluster each
time: at datacenter size (``benchmarks/datacenter.py``: 1,000 nodes, 3,000 running jobs) the service probe's
read of every running job under the control plane's lock and the health loop's reads of every node every
0.5 s took half the server's CPU and held up submits and turns for seconds."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fairpod.executors.timed import TimedExecutor
from fairpod.health.manager import HealthManager
from fairpod.model.jobs import JobState
from fairpod.model.nodes import NodeHealth
from fairpod.server.core.transitions.services import Services
from fairpod.server.runtime.wiring import control_plane

from ..inproc import InProc


def counting(store: Any, names: tuple[str, ...]) -> Counter:
    """Count the calls of ``names`` on ``store`` and the records they return."""
    got: Counter = Counter()
    for name in names:
        real: Callable[..., Any] = getattr(store, name)

        def wrapped(*a: Any, _real: Callable[..., Any] = real, _name: str = name, **kw: Any) -> Any:
            out = _real(*a, **kw)
            got[_name] += 1
            got[_name + " records"] += len(out) if isinstance(out, list) else out is not None
            return out

        setattr(store, name, wrapped)
    return got


def test_the_service_probe_reads_no_batch_job(tmp_path: Path) -> None:
    h = InProc(tmp_path)
    for i in range(3):
        h.submit(f"batch{i}", "john", 600)
    h.turn(3)
    assert len(h.cp.runs) == 3 and all(r.launched for r in h.cp.runs.values())
    services = Services(h.cp)
    reads = counting(h.cp.store, ("get_job",))
    targets, ended = services._targets()
    assert (targets, ended) == ([], set())
    assert reads["get_job"] == 0, reads  # (was one read per running job, under the control plane's lock)
    picked = sorted(h.cp.runs)[1]
    h.cp.runs[picked].ports = [40001]  # as a service's launch would pick: this attempt alone is read
    assert services._targets() == ([], set())  # (a batch job still: no target)
    assert reads["get_job"] == 1, reads


def test_the_health_loop_reads_only_the_nodes_it_acts_on(tmp_path: Path) -> None:
    h = InProc(tmp_path)
    nodes = h.cp.store.list_nodes()
    hm = HealthManager(h.cp, interval=60)
    reads = counting(h.cp.store, ("list_nodes", "get_node"))
    hm.recovery_round()  # every 0.5 s: no node waits for a reboot or a replacement
    assert reads["list_nodes records"] == 0, reads
    hm.agent_round()  # each schedulable node read once, not again for its probe
    assert reads["list_nodes records"] == len(nodes) and reads["get_node"] == 0, reads
    # a node that waits for a reboot is still found and rebooted
    first = nodes[0].name
    h.cp.store.update_node(first, {"health_status": NodeHealth.PENDING_REBOOT})
    reads.clear()
    hm.recover[first] = "reboot"
    hm.recovery_round()
    assert reads["list_nodes records"] == 1, reads
    assert hm.recover == {}  # taken up: the reboot is under way


def test_a_restart_reads_the_jobs_once_and_adopts_the_timed_replicas(tmp_path: Path) -> None:
    """A new control plane (and a new timed executor on the same runs directory, as after kill -9 of
    ``fairpod up --executor timed``) and its services' drains read the unfinished jobs in one query, not once
    more per live attempt, and adopt the replicas still running: nothing is taken for ended while it was down.
    That one query reads what the memory needs (``engine_jobs``), no job whole: none of these needs acting on."""
    h = InProc(tmp_path)
    for i in range(4):
        h.submit(f"batch{i}", "john", 600)
    h.turn(3)
    assert len(h.cp.runs) == 4 and all(r.launched for r in h.cp.runs.values())
    h.cp.stop()  # the old executor is not closed: as after kill -9
    reads = counting(h.store, ("get_job", "get_jobs", "list_jobs", "engine_jobs"))
    cp = control_plane(h.store, TimedExecutor(tmp_path / "runs", clock=h.clock), tmp_path, clock=h.clock)
    try:
        Services(cp)  # as runtime.build makes it: it resumes the drains of services that were shrinking
        # (was 2 get_job per live attempt and 2 lists; then 1 list of the jobs whole)
        assert reads["engine_jobs"] == 1 and reads["get_job"] + reads["get_jobs"] + reads["list_jobs"] == 0, reads
        assert sorted(cp.runs) == sorted(j.id for j in h.store.list_jobs()) and not cp.snap.pending
        assert {j.state for j in h.store.list_jobs()} == {JobState.RUNNING}
        h.clock.advance(601)
        for _ in range(3):
            cp.reconcile_once()
        assert {j.state for j in h.store.list_jobs()} == {JobState.SUCCEEDED}
    finally:
        cp.stop()
        h.store.close()


def test_the_log_rules_read_the_new_attempts_jobs_in_one_query(tmp_path: Path) -> None:
    """The log rules' keeper reads the job of each attempt it has not looked at yet (the ones started since its last
    look: ~70 a second at 10,000 nodes): in one query with the turn's batch, not one each."""
    from fairpod.server.core.transitions.logrules import LogWatch

    h = InProc(tmp_path)
    for i in range(4):
        h.submit(f"batch{i}", "john", 600)
    h.turn(3)
    assert len(h.cp.runs) == 4 and all(r.launched for r in h.cp.runs.values())
    watch = LogWatch()
    reads = counting(h.store, ("get_job", "get_jobs"))
    with h.cp.lock, h.cp.store.batch():
        watch.tick(h.cp)
    assert reads["get_job"] == 0 and reads["get_jobs"] == 1, reads  # (was one get_job per attempt)
    assert watch.watches == dict.fromkeys(h.cp.runs)  # each looked at: none has rules
    reads.clear()
    watch.last = float("-inf")
    with h.cp.lock, h.cp.store.batch():
        watch.tick(h.cp)  # known to have no rules: nothing read again
    assert reads["get_job"] + reads["get_jobs"] == 0, reads
