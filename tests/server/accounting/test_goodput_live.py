"""Goodput on a live server with real processes: the work since the last checkpoint of an attempt that failed is
lost, the rest kept; in get-job, report usage and the metrics."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ... import httpclient
from ..conftest import Server, wait_for

TRAIN = """
import sys, time, pathlib
from fairpod import sdk
d = pathlib.Path(sys.argv[1])
time.sleep(1.0)
sdk.report_progress(10, checkpoint=d / "ckpt", strict=True)
time.sleep(1.0)
if sdk.restart_count() == 0:
    sys.exit(5)
"""


def test_work_since_the_checkpoint_of_a_failed_attempt_is_lost_the_rest_kept(server: Server, tmp_path: Path) -> None:
    s = server
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    s.submit(name="gp", team="john", auto_resume=True, max_retry=1, termination_grace_seconds=1,
             command=[sys.executable, str(script), str(tmp_path)])
    done = s.wait_state("gp", "Succeeded", 60)
    g = done["goodput"]
    lost = g["lost_accelerator_seconds"]
    assert g["kept_accelerator_seconds"] > 4 * 2  # attempt 0 up to its checkpoint (>1 s), all of attempt 1 (>2 s)
    assert lost["failure"] > 4 * 0.9 and sum(lost.values()) == lost["failure"]  # ~1 s after the checkpoint, x 4
    assert 0 < g["goodput"] < 1 and g["goodput"] == round(g["kept_accelerator_seconds"] / (
        g["kept_accelerator_seconds"] + lost["failure"]), 4)
    text = s.cli("get-job", "gp").stdout
    assert "Goodput:" in text and "% (" in text and "to failure" in text
    rep = json.loads(s.cli("report", "usage", "-o", "json").stdout)["goodput"]
    assert rep["john"] == rep["*"] and rep["john"]["goodput"] == g["goodput"]
    assert "Goodput" in s.cli("report", "usage").stdout
    # the dashboard's teams page reads it alone: the same figures, the period's filters, without the task rows
    alone = s.api("GET", "/reports/goodput").json()
    assert alone["goodput"] == rep and "tasks" not in alone and "usage" not in alone
    for params in ({"team": "smith"}, {"to": "2001-01-01"}):  # another team's; a period that ended before
        none = s.api("GET", "/reports/goodput", params=params).json()["goodput"]
        assert "john" not in none and none["*"]["goodput"] is None, (params, none)
    bad = s.api("GET", "/reports/goodput", params={"from": "2030-01-02", "to": "2030-01-01"})
    assert bad.status_code == 422 and "'from' (2030-01-02" in bad.json()["detail"]
    metrics = wait_for(lambda: (t := httpclient.get(s.url + "/metrics", headers={
        "Authorization": f"Bearer {s.token}"}).text) and "fairpod_goodput_lost" in t and t, 10, "the metrics")
    line = next(ln for ln in metrics.splitlines()
                if ln.startswith('fairpod_goodput_lost_accelerator_seconds_total{cause="failure",team="john"}'))
    assert abs(float(line.split()[-1]) - lost["failure"]) < 0.01
    assert 'fairpod_goodput_kept_accelerator_seconds_total{team="john"}' in metrics
