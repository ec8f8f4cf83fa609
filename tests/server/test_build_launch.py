"""One ``build_launch`` for a first launch and for the new ranks of a job that grew: the same command, env,
checkpoint directory and replicas, only fewer of them (in-process: the timed executor, a FAKE clock)."""

from __future__ import annotations

from pathlib import Path

from fairpod.executors.base import JobLaunch
from fairpod.model.jobs import JobState

from .inproc import InProc


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

