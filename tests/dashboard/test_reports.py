"""``fairpod report usage`` and GET /reports/usage against a real server, on usage with known totals."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.store import Store
from fairpod.store.usage import GROUP, TEAM, UsageSample

from ..server.conftest import Server, running

# a day well inside the usage retention (the control plane drops samples older than 400 days)
_D1 = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=30)
D1, D2, D5 = (str(_D1 + dt.timedelta(days=k)) for k in (0, 1, 4))
DAY = dt.datetime(_D1.year, _D1.month, _D1.day, tzinfo=dt.UTC).timestamp()
STEP, SAMPLES = 240, 30 * 15


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A server started on a database that already holds the usage history below (a running server rolls up only
    what comes after what it has rolled up: samples are written at the time they are of)."""
    yield from running(tmp_path, before_start=record_history)


def record_history(server: Server) -> None:
    """Day D1 00:00-12:00: john uses 8 of its 12, smith 8 of its 4 (4 borrowed from john); then both idle
    until D2 06:00. A sample every 4 minutes (a sample's figures hold at most 5)."""
    store = Store(f"sqlite:///{server.home / 'fairpod.db'}")
    store.create_all()
    with store.tx() as t:
        for i in range(SAMPLES):
            ts = DAY + i * STEP
            u = 8 if ts < DAY + 12 * 3600 else 0
            t.append_usage(ts, [
                UsageSample(GROUP, "workers", "ml.g5.12xlarge", acc=2 * u, cap_acc=16, nodes=4, healthy_nodes=4),
                UsageSample(TEAM, "john", "ml.g5.12xlarge", acc=u, cap_acc=12, lent=u // 2),
                UsageSample(TEAM, "smith", "ml.g5.12xlarge", acc=u, cap_acc=4, borrowed=u // 2),
            ])
    store.close()


def test_usage_report_api_and_cli(server: Server):
    r = server.api("GET", "/reports/usage", params={"from": D1, "to": D2})
    assert r.status_code == 200, r.text
    rep = r.json()
    rows = {(u["date"], u["team"]): u for u in rep["usage"]}
    john, smith = rows[(D1, "john")], rows[(D1, "smith")]
    assert john["accelerator_hours"] == 96 and john["within_quota_hours"] == 96 and john["borrowed_hours"] == 0
    assert john["lent_hours"] == 48 and john["quota_hours"] == 12 * 24 and john["utilization"] == round(96 / 288, 4)
    assert smith["accelerator_hours"] == 96 and smith["within_quota_hours"] == 48 and smith["borrowed_hours"] == 48
    # day 2: samples until about 06:00; the last one holds 5 minutes, then nothing is recorded
    assert rows[(D2, "john")]["accelerator_hours"] == 0
    covered = DAY + (SAMPLES - 1) * STEP + 300 - (DAY + 86400)
    assert abs(rows[(D2, "john")]["quota_hours"] - 12 * covered / 3600) < 1e-3
    assert abs(rows[(D2, "john")]["recorded_hours"] - covered / 3600) < 1e-3
    totals = {t["team"]: t for t in rep["totals"]}
    assert totals["smith"]["borrowed_hours"] == 48 and rep["timezone"] == "UTC"

    # a member sees their team only, and may not ask for another
    alice = server.api("POST", "/users", json={"name": "alice", "role": "member", "teams": ["smith"]}).json()["token"]
    mine = server.api("GET", "/reports/usage", alice, params={"from": D1, "to": D1}).json()
    assert {u["team"] for u in mine["usage"]} == {"smith"}
    r = server.api("GET", "/reports/usage", alice, params={"from": D1, "to": D1, "team": "john"})
    assert r.status_code == 403 and "not a member of team(s) john" in r.json()["detail"]

    # the CLI: csv, json, table, and per-task rows of a job that ran today
    out = server.cli("report", "usage", "--from", D1, "--to", D1, "-o", "csv").stdout
    got = list(csv.DictReader(io.StringIO(out)))
    assert [(g["team"], float(g["borrowed_hours"])) for g in got] == [("john", 0.0), ("smith", 48.0)]
    js = json.loads(server.cli("report", "usage", "--from", D1, "--to", D2, "-o", "json").stdout)
    assert js["usage"] == rep["usage"]
    table = server.cli("report", "usage", "--from", D1, "--to", D1).stdout
    assert "BORROWED" in table and "smith" in table and "33 %" in table

    server.submit(name="short", team="john", nodes=1, priority="inference", command=["sleep", "1"])
    done = server.wait_state("short", "Succeeded", 20)
    out = server.cli("report", "usage", "--tasks", "-o", "csv").stdout
    task = {t["name"]: t for t in csv.DictReader(io.StringIO(out))}["short"]
    assert task["state"] == "Succeeded" and task["priority"] == "inference" and task["accelerators"] == "4"
    start, end = task["run_windows"].split("/")
    assert start.endswith("Z") and end.endswith("Z") and float(task["accelerator_hours"]) > 0
    ran = done["finished_at"] - done["first_started_at"]
    assert abs(float(task["accelerator_hours"]) - 4 * ran / 3600) < 4 * 2 / 3600

    # clear errors, no tracebacks
    for args, msg in [(("--from", "2024-02-30"), "is not a date"),
                      (("--from", D5, "--to", D1), "must be before"),
                      (("--team", "nosuch"), "no team nosuch"),
                      (("--tasks",), "--tasks goes with -o csv")]:
        r = server.cli("report", "usage", *args, check=False)
        assert r.returncode != 0 and msg in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    assert "accelerator-hours" in server.cli("report", "usage", "--help").stdout
