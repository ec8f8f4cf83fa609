"""benchmarks/datacenter.py at its small size runs in the suite: a live server (timed executor, SQLite), the
fill, the steady submits and reads, /metrics, the kill -9 and restart. It checks that the figures were taken,
not that goals are met (speed targets live in benchmarks/, not in tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_small_datacenter_runs_and_prints_every_figure(tmp_path: Path):
    out = tmp_path / "dc.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "datacenter.py"), "--small", "--no-browser",
                        "--keys", "--timeout", "150", "-o", str(out)], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads(out.read_text())
    assert d["nodes"] == 100 and d["store"] == "sqlite" and d["engine"].startswith(("native", "pure Python"))
    assert d["fill_jobs"] >= 1000 and 0 < d["submits"] <= 150 and d["keys"]  # each steady submit with its key
    assert d["waiting_after"] > 0 and d["running_after"] > 0
    assert d["turns"] > 0 and d["turn_p99_s"] is not None and 0 < d["engine_share"] <= 1
    assert d["admitted"] > 0 and d["reads"] > 0
    assert d["list_p99_ms"] > 0 and d["get_p99_ms"] > 0
    assert d["metrics_bytes"] > 0 and d["rss_mib"] > 0 and d["server_cpu_s"] > 0 and d["client_cpu_s"] > 0
    assert d["decision_cancelled"] >= 1 and d["decision_cycles"] >= 1 and d["decision_engine_s"] > 0
    assert 0 < d["restart_healthz_s"] <= d["restart_first_admission_s"] < 150
    assert "sustained submits" in r.stdout and "restart (kill -9)" in r.stdout and "engine per decision" in r.stdout


@pytest.mark.parametrize(("flags", "says"), [
    (["--nodes", "0"], "datacenter: --nodes must be > 0, got 0"),
    (["--submit-threads", "0"], "datacenter: --submit-threads must be from 1 to 256, not 0"),
])
def test_bad_sizes_are_one_line_on_stderr(flags: list[str], says: str):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "datacenter.py"), *flags],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == says


def test_the_http_floor_serves_submits_and_prints_its_figures():
    """benchmarks/http_floor.py: a server with only a submit's HTTP part, driven by datacenter.py's client."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "http_floor.py"), "--seconds", "1", "--threads",
                        "2"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["benchmark"] == "http_floor" and d["requests"] > 0 and d["rate"] > 0
    assert d["p99_ms"] >= d["p50_ms"] > 0 and d["server_cpu_ms_per_request"] > 0 and d["client_cpu_ms_per_request"] > 0
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "http_floor.py"), "--threads", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--threads in 1..256" in bad.stderr.strip().splitlines()[-1]


def test_the_worker_submit_benchmark_prints_its_figures():
    """benchmarks/worker_submit.py: an API worker's submits in-process, their CPU and SQL statements each."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "worker_submit.py"), "--submits", "20"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["benchmark"] == "worker_submit" and d["submits"] == 20 and d["cpu_ms_per_submit"] > 0
    assert d["sql"]["INSERT"] >= 3 * 20 and d["transactions_per_submit"] >= 1


def test_the_list_page_benchmark_prints_its_figures():
    """benchmarks/list_page.py: the store's read of a list page, its specs cached and not."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "list_page.py"), "--jobs", "300", "--teams", "3",
                        "--pages", "5"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["benchmark"] == "list_page" and d["jobs"] == 300 and d["jobs_per_page"] == 100
    assert d["uncached_p99_ms"] >= d["uncached_p50_ms"] > 0 and d["cached_p99_ms"] >= d["cached_p50_ms"] > 0
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "list_page.py"), "--pages", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--pages in 1..100000" in bad.stderr.strip().splitlines()[-1]
