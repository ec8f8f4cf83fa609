"""The task overview's window figures (``GET /dashboard/tasks``: finished counts, average wait and run time) come
from the jobs that started or finished in the window, read as light rows: a job that ended before the window,
or started before it, counts only for what happened inside it. At datacenter size the overview read every job
of the window in full (100,000 waiting jobs among them) and took seconds (benchmarks/datacenter.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairpod.server.routes_dashboard import tasks_view
from fairpod.store.db import Ops

from .inproc import InProc


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
    finally:
        h.close()
