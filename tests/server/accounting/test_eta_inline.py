"""A request asks for a new job's start estimate without waiting for a long forecast: at 10,000 jobs waiting one
takes tenths of a second, and ``get-job`` or a ``list-jobs`` page of new jobs ran it in the request
(benchmarks/datacenter.py). A cheap forecast is still made in the request, so a small cluster answers at once."""

from __future__ import annotations

import time
from pathlib import Path

from fairpod.model.jobs import JobState

from ..inproc import InProc


def test_a_request_runs_only_a_cheap_forecast_and_wakes_the_estimator_for_a_long_one(tmp_path: Path) -> None:
    h = InProc(tmp_path)
    try:
        for i in range(3):  # every node of the seed cluster (4 x 4 GPUs): one runs, two wait
            h.submit(f"full{i}", "john", 60, nodes=4, expected_duration_seconds=60)
        h.turn()
        est = h.cp.eta
        # no CPU or lock budget to wait for between refreshes here, and every forecast counts as cheap until the
        # test says otherwise: on a loaded machine the seed cluster's forecast itself can take over the 20 ms
        est.spacing, est.lock_share, est.inline = 0.0, float("inf"), 60.0
        est.refresh(h.cp)
        assert est.get(h.job("full1")) is not None
        done = est.refreshes

        # the last forecast was cheap (well under `inline`): the request makes one, and answers with the estimate
        first = h.submit("first", "john", 60, nodes=4, expected_duration_seconds=60)
        assert first.state == JobState.PENDING and est.get(first) is None
        est.ensure(h.cp, [first])
        assert est.refreshes == done + 1 and est.get(first) is not None

        # a forecast longer than `inline` (as at datacenter size): the request does not wait for one...
        est.inline = 0.0
        late = h.submit("late", "john", 60, nodes=4, expected_duration_seconds=60)
        est.ensure(h.cp, [late])
        assert est.refreshes == done + 1 and est.get(late) is None
        # ...the estimator's thread makes it as soon as the budget allows (not at its periodic refresh)
        est.every = est.max_age = 3600.0
        est.start(h.cp)
        deadline = time.monotonic() + 30
        while est.refreshes < done + 2 and time.monotonic() < deadline:  # counted once the estimates are set
            time.sleep(0.01)
        assert est.get(late) is not None and est.refreshes == done + 2
    finally:
        h.close()
