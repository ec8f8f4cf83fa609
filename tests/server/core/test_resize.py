"""The crash windows of elastic grow, elastic shrink and cancel: the control plane dies at the transition (a hook
on the executor call raises ``Died``, and from then on its store refuses every write, as a killed process
writes nothing), a new control plane on the same store and run directory plays the restart. Real SQLite, the
local executor, real replica processes and signals.

The rule: an intent the store has committed is carried out after a restart, exactly once (stops sent again,
launches finished or undone); a signal is never sent for an intent the store does not hold.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairpod.executors.local import LocalExecutor
from fairpod.model.jobs import JobSpec, JobState
from fairpod.model.spec import parse_spec
from fairpod.server.nodes import sync_nodes
from fairpod.server.runs import job_key
from fairpod.server.runtime.wiring import control_plane
from fairpod.store import Store
from fairpod.store.records import Job

from ..faults import fail_writes

SPEC = (Path(__file__).resolve().parents[3] / "examples" / "four" / "spec.yaml").read_text()  # 4 x unit1


class Died(BaseException):
    """The control plane was killed here (not an Exception: nothing in the plane catches it)."""


class Plant:
    """One control plane after another on ``tmp``'s store and run directory; ``kill`` at a hook, ``restart``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.out = tmp / "out.log"
        store = Store(f"sqlite:///{tmp / 'fairpod.db'}")
        store.create_all()
        cluster = parse_spec(yaml.safe_load(SPEC))
        sync_nodes(store, cluster)
        store.put_spec(cluster)
        store.close()
        self.dead = False
        self._start()

    def _start(self) -> None:
        self.store = Store(f"sqlite:///{self.tmp / 'fairpod.db'}")
        self.executor = LocalExecutor(self.tmp / "runs")
        self.cp = control_plane(self.store, self.executor, self.tmp)

    def die(self) -> None:
        """From now on this control plane writes nothing; raises ``Died``."""
        self.dead = True
        fail_writes(self.store.engine, lambda: True)
        raise Died

    def hook(self, name: str, before: Callable[..., bool], call_first: bool = False) -> None:
        """Around ``executor.<name>``: when ``before(*args)`` holds, die before the call (or right after it)."""
        real = getattr(self.executor, name)

        def wrapped(*args: Any, **kw: Any) -> Any:
            if before(*args, **kw):
                if call_first:
                    real(*args, **kw)
                self.die()
            return real(*args, **kw)

        setattr(self.executor, name, wrapped)

    def restart(self) -> None:
        """The killed control plane's memory is gone; its replicas live on. A new one starts on the same files."""
        self.executor.close()
        self.store.close()
        self.dead = False
        self._start()

    def submit(self, name: str, team: str, command: str, **kw: Any) -> Job:
        return self.cp.submit(JobSpec(name=name, team=team, command=["sh", "-c", command],
                                      termination_grace_seconds=1, **kw), "tester")

    def job(self, name: str) -> Job:
        (job,) = [j for j in self.store.list_jobs() if j.name == name]
        return job

    def turns_until(self, what: Callable[[], Any], timeout: float = 30, catch: bool = False) -> Any:
        """Reconcile turns until ``what()`` is true (``Died`` from a hook ends them when ``catch``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.cp.reconcile_once()
            except Died:
                if not catch:
                    raise
            if got := what():
                return got
            time.sleep(0.05)
        raise AssertionError(f"not reached in {timeout} s: {what}")

    def lines(self, word: str) -> list[str]:
        return [ln for ln in self.out.read_text().splitlines() if ln.startswith(word)] if self.out.exists() else []

    def close(self) -> None:
        for job in self.store.list_jobs(finished=False):
            self.executor.stop(job_key(job), job.attempt, 0.0)
        self.executor.close()
        self.store.close()


@pytest.fixture
def plant(tmp_path: Path) -> Iterator[Plant]:
    p = Plant(tmp_path)
    yield p
    p.close()


REPLICA = ('echo "start $NODE_RANK $$" >> {out}; trap \'echo "term $NODE_RANK" >> {out}; exit 1\' TERM; '
           'while :; do sleep 0.1; done')


def elastic_on_two(p: Plant) -> Job:
    """smith's elastic job (1..4) running on the two nodes john's 2-node job leaves free."""
    p.submit("john-a", "john", "sleep 300", nodes=2)
    p.turns_until(lambda: p.job("john-a").state == JobState.RUNNING and p.cp.runs[p.job("john-a").id].launched)
    p.submit("ddp", "smith", REPLICA.format(out=p.out), min_nodes=1, max_nodes=4)
    p.turns_until(lambda: len(p.lines("start")) == 2)
    return p.job("ddp")


@pytest.mark.parametrize("cut", ["before the new ranks start", "between the new ranks"])
def test_a_growth_cut_by_a_crash_is_finished_after_the_restart(plant: Plant, cut: str):
    """Killed after the growth's slots were committed, before its new ranks started (or after the first of the
    two): after the restart both start, the two healthy ranks keep running, nothing is undone twice. Fails
    without the fix: the store said 4 nodes while rank 2 never started (a node reserved, idle), or adoption
    killed the healthy ranks and the job ended Failed."""
    p = plant
    elastic_on_two(p)
    healthy = {ln.split()[1]: ln.split()[2] for ln in p.lines("start")}
    if cut == "before the new ranks start":
        p.hook("add_replicas", lambda job: True)
    else:  # rank 2's supervisor written and forked, rank 3 not
        p.hook("_spawn", lambda job, rank, spec: job.world > 0 and rank == 3)
    p.cp.cancel(p.job("john-a"), "tester")  # its two nodes free: ddp grows to 4
    p.turns_until(lambda: p.dead, catch=True)
    p.restart()
    # every rank has started (a cut rank 2 may have written its line before it was undone: 4 lines need not be 4 ranks)
    p.turns_until(lambda: {ln.split()[1] for ln in p.lines("start")} >= {"0", "1", "2", "3"})
    job = p.job("ddp")
    assert (job.state, job.nodes) == (JobState.RUNNING, 4), job.reason
    starts = [ln.split() for ln in p.lines("start")]
    assert sorted(s[1] for s in starts if s[1] in healthy) == ["0", "1"], starts  # the healthy ones once
    assert {s[1] for s in starts} == {"0", "1", "2", "3"}  # a cut rank 2 was undone (killed) and started again
    assert {s[1]: s[2] for s in starts if s[1] in healthy} == healthy and not p.lines("term")
    assert p.executor.replica_ranks(job_key(job), job.attempt) == {0, 1, 2, 3}
    assert not p.cp.runs[job.id].starting and len(p.cp.runs[job.id].slots) == 4


@pytest.mark.parametrize("when", ["right after the SIGTERM", "before the SIGTERM"])
def test_a_shrink_cut_by_a_crash_frees_the_removed_ranks_slots(plant: Plant, when: str):
    """john reclaims his two nodes from smith's elastic job on 4; killed as the shrink stops ranks 2 and 3.
    After the restart the removed ranks' exits end nothing, their slots go to john's job, ranks 0 and 1 run
    on. Fails without the fix ("right after"): the SIGTERM went out before the shrink was committed, so after
    the restart their exits were taken as ordinary ones (the job failed or shrank again and waited for ever)."""
    p = plant
    p.submit("ddp", "smith", REPLICA.format(out=p.out), min_nodes=1, max_nodes=4)
    p.turns_until(lambda: len(p.lines("start")) == 4)
    p.hook("stop_replicas", lambda *a: True, call_first=when == "right after the SIGTERM")
    p.submit("john-a", "john", "sleep 300", nodes=2)
    p.turns_until(lambda: p.dead, catch=True)
    if when == "right after the SIGTERM":
        p.executor.poll(ack=False)
        deadline = time.monotonic() + 10
        while len(p.lines("term")) < 2 and time.monotonic() < deadline:  # they exit while nobody watches
            time.sleep(0.05)
    p.restart()
    p.turns_until(lambda: p.job("john-a").state == JobState.RUNNING and p.cp.runs[p.job("john-a").id].launched)
    job = p.job("ddp")
    assert (job.state, job.nodes) == (JobState.RUNNING, 2), job.reason
    assert sorted(ln.split()[1] for ln in p.lines("term")) == ["2", "3"]  # stopped once each
    assert sorted(ln.split()[1] for ln in p.lines("start")) == ["0", "1", "2", "3"]  # nothing restarted
    run = p.cp.runs[job.id]
    assert not run.removing and len(run.slots) == 2


@pytest.mark.parametrize("how", ["killed", "a failed stop"])
def test_a_cancel_cut_between_its_commit_and_the_stop_is_carried_out(plant: Plant, how: str):
    """The cancel is committed (``stopping=cancel``) and the stop never reaches the replicas: the control plane
    is killed right then (the restart sends the stop again), or the stop fails (a second cancel sends it
    again). The job ends Cancelled, its slots free. Fails without the fix: Running for ever, the second cancel
    answered and did nothing, the restart sent nothing."""
    p = plant
    p.submit("j", "john", REPLICA.format(out=p.out), nodes=2)
    p.turns_until(lambda: len(p.lines("start")) == 2)
    if how == "killed":
        p.hook("stop", lambda *a: True)
        with pytest.raises(Died):
            p.cp.cancel(p.job("j"), "tester")
        p.restart()
    else:
        real = p.executor.stop
        calls: list[int] = []

        def stop(*a: Any) -> None:
            calls.append(1)
            if len(calls) == 1:
                raise OSError("Read-only file system")
            real(*a)

        p.executor.stop = stop  # type: ignore[method-assign]
        with pytest.raises(OSError):
            p.cp.cancel(p.job("j"), "tester")
        p.turns_until(lambda: True)
        assert p.job("j").state == JobState.RUNNING and not p.lines("term")
        p.cp.cancel(p.job("j"), "tester")
    job = p.turns_until(lambda: (j := p.job("j")).state.finished and j)
    assert (job.state, job.reason) == (JobState.CANCELLED, "cancelled by tester")
    assert sorted(ln.split()[1] for ln in p.lines("term")) == ["0", "1"]
    assert not any(p.cp.slots.used.values())
