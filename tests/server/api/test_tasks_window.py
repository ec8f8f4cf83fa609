"""The task overview's window figures (``GET /dashboard/tasks``: finished counts, average wait and run time) come
from the jobs that started or finished in the window, read as light rows: a job that ended before the window,
or started before it, counts only for what happened inside it. At datacenter size the overview read every job
of the window in full (100,000 waiting jobs among them) and took seconds (benchmarks/datacenter.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairpod.model.jobs import JobState
from fairpod.server.api.routes_dashboard import tasks_view
from fairpod.store.db import Ops

from ..inproc import InProc


def test_the_window_counts_what_started_and_finished_in_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    h = InProc(tmp_path)
    # the store stamps a submit with the time now: the fake clock's here (tests only), as the control plane's
    monkeypatch.setattr(Ops, "_now", staticmethod(lambda now: h.clock() if now is None else float(now)))
    try:
        h.submit("old", "john", 100, nodes=4)
        h.turn()
        h.clock.advance(100)
        h.turn()  # old ran 100 s and ended: more than an hour before the window below ends
        h.clock.advance(4000)
        t1 = h.clock()
        h.submit("long", "john", 600, nodes=4)
        h.turn()
        h.submit("waiter", "john", 60, nodes=4)  # every node is long's: waits 600 s
        h.turn()
        h.clock.advance(600)
        h.turn(2)
        h.clock.advance(60)
        h.turn(2)
        h.clock.advance(3450)  # the last hour: [t1 + 510, t1 + 4110]; long started before it, ended in it
        assert [h.job(n).state.value for n in ("old", "long", "waiter")] == ["Succeeded"] * 3
        assert h.job("long").first_started_at == t1 and h.job("waiter").first_started_at == t1 + 600
        v = tasks_view(h.cp, None, None, None, "1h", 50)
        assert v["counts"]["Succeeded"] == 2 and v["finished_in_window"] == 2
        assert v["admitted_in_window"] == 1  # waiter (at t1 + 600); long started before the window
        assert v["avg_wait_seconds"] == 600.0
        assert v["avg_run_seconds"] == 330.0  # (600 + 60) / 2
        assert [t["name"] for t in v["tasks"]] == ["waiter", "long"]  # the finished ones, newest first
        v6 = tasks_view(h.cp, None, None, None, "6h", 50)
        assert v6["counts"]["Succeeded"] == 3 and v6["admitted_in_window"] == 3
        assert v6["avg_wait_seconds"] == 200.0  # old 0, long 0, waiter 600
        assert [t["name"] for t in v6["tasks"]] == ["waiter", "long", "old"]
        only = tasks_view(h.cp, None, None, None, "6h", 1)
        assert [t["name"] for t in only["tasks"]] == ["waiter"] and only["counts"]["Succeeded"] == 3
        # counted by the database (no group) as row by row (the seed cluster's one instance group): the same
        group = h.cp.spec.cluster.instance_groups[0].name
        for win, limit, st, teams in [("1h", 50, None, None), ("6h", 50, None, None), ("6h", 1, None, None),
                                      ("6h", 50, [JobState.SUCCEEDED], None), ("6h", 50, [JobState.FAILED], None),
                                      ("6h", 50, None, ["john"]), ("6h", 50, None, ["smith"]), ("1d", 0, None, None)]:
            summed = tasks_view(h.cp, teams, None, st, win, limit)
            rowwise = tasks_view(h.cp, teams, group, st, win, limit)
            for key in ("counts", "admitted_in_window", "finished_in_window", "avg_wait_seconds", "avg_run_seconds"):
                assert summed[key] == rowwise[key], (key, win, st, teams)
            assert [t["name"] for t in summed["tasks"]] == [t["name"] for t in rowwise["tasks"]], (win, st, teams)
    finally:
        h.close()


def test_the_overview_pages_every_unfinished_job_in_order_without_reading_them_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an instance-group filter the overview counts the unfinished jobs in the store and reads only the
    (state, team) runs its page overlaps (``task_index.unfinished_page``); its counts and every page, whatever
    the offset, limit and states, are those of the row-by-row order an instance-group filter still uses
    (running, stopping, waiting; by team, queue position, submission). The seed cluster has one instance group,
    so with and without the filter the jobs are the same."""
    h = InProc(tmp_path)
    try:
        for i in range(14):  # john and smith each fill two of the four nodes, then the rest wait
            h.submit(f"j{i}", ("john", "smith")[i % 2], 600, nodes=1, accelerators=2 + i % 3)
        h.turn(2)
        for i in range(6):
            h.submit(f"late{i}", "smith", 60, nodes=1)
        h.turn()
        states = {j.state.value for j in h.store.list_jobs()}
        assert {"Running", "Pending"} <= states, states
        group = h.cp.spec.cluster.instance_groups[0].name
        cases = [(None, 0, 500), (None, 0, 1), (None, 3, 5), (None, 7, 17), (None, 19, 3), (None, 30, 10),
                 (["Pending"], 0, 4), (["Pending"], 2, 6), (["Running"], 1, 2), (["Running", "Pending"], 5, 9)]
        for st, offset, limit in cases:
            want = [JobState(s) for s in st] if st else None
            paged = tasks_view(h.cp, None, None, want, "1h", 0, limit=limit, offset=offset)
            rows = tasks_view(h.cp, None, group, want, "1h", 0, limit=limit, offset=offset)
            assert [t["name"] for t in paged["tasks"]] == [t["name"] for t in rows["tasks"]], (st, offset, limit)
            for key in ("counts", "unfinished_total", "waiting_after_preemption"):
                assert paged[key] == rows[key], (key, st, offset, limit)
        assert len(tasks_view(h.cp, None, None, None, "1h", 0)["tasks"]) == 20
        def every_row(*a: object) -> None:
            raise AssertionError("read every unfinished job")

        monkeypatch.setattr(h.cp.queries, "unfinished_rows", every_row)
        monkeypatch.setattr(h.cp.queries, "recent_rows", every_row)
        assert tasks_view(h.cp, ["smith"], None, None, "1h", 0, limit=2)["unfinished_total"] == 13
    finally:
        h.close()
