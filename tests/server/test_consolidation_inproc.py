"""The control plane keeps which running jobs borrow across a rebuild of its memory from the store, so that
placement keeps borrowed work apart from work within quota after a restart too (governance/placement.py)."""

from __future__ import annotations

from pathlib import Path

from fairpod.model.jobs import JobState
from fairpod.server.runs import to_engine

from .inproc import InProc


def test_borrowed_jobs_are_known_as_such_after_a_reload(tmp_path: Path):
    h = InProc(tmp_path)
    try:
        for i in range(4):  # john: 3 nodes of quota, the 4th borrowed from smith
            h.submit(f"j{i}", "john", 100_000)
        h.turn()
        jobs = [h.job(f"j{i}") for i in range(4)]
        assert [j.state for j in jobs] == [JobState.RUNNING] * 4
        assert [bool(j.borrowed_from) for j in jobs] == [False, False, False, True]
        h.cp.reload()  # the memory again from the store, as after a restart or a failed write
        snap = h.cp.snap
        assert [snap.running[to_engine(j.id)].borrows for j in jobs] == [False, False, False, True]
        borrowed = h.job("j3").placement
        assert [snap.nodes[n].borrowing for n in borrowed] == [1] * len(borrowed)
        assert sum(nd.borrowing for nd in snap.nodes.values()) == len(borrowed)
    finally:
        h.close()
