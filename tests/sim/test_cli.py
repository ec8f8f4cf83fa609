"""``fairpod simulate`` end to end, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .helpers import SEED_SPEC, SEED_TRACE, write_trace

FAIRPOD = Path(sys.executable).parent / "fairpod"


def _run(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([str(FAIRPOD), "simulate", *map(str, args)], capture_output=True, text=True, timeout=120)


def test_simulate_writes_report_plot_timeline_and_jobs(tmp_path):
    out, png = tmp_path / "report.json", tmp_path / "usage.png"
    p = _run(SEED_SPEC, SEED_TRACE, "-o", out, "--plot", png, "--timeline", "--jobs")
    assert p.returncode == 0, p.stderr
    assert "3/3 jobs completed" in p.stdout
    r = json.loads(out.read_text())
    assert r["makespan"] == 1140.0
    assert len(r["jobs"]) == 3 and r["timeline"]
    assert set(r["timeline"][0]) == {"t", "allocated", "borrowed"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_report_to_stdout_without_output(tmp_path):
    p = _run(SEED_SPEC, SEED_TRACE)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["cluster"]["completed"] == 3


def test_unknown_team_is_one_line_error(tmp_path):
    trace = write_trace(tmp_path, ["0,john,10,4,,,,,", "5,nobody,10,4,,,,,"])
    p = _run(SEED_SPEC, trace, "-o", tmp_path / "r.json")
    assert p.returncode == 1
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0] == (f"fairpod: error: {trace}:3: column team: unknown team 'nobody' (teams: john, smith)")
    assert not (tmp_path / "r.json").exists()


def test_other_bad_input_is_one_line_error(tmp_path):
    bad_spec = tmp_path / "spec.yaml"
    bad_spec.write_text("teams: [{name: Bad}]\n")
    cases = [
        (bad_spec, SEED_TRACE, "-o", tmp_path / "r.json"),
        (tmp_path / "missing.yaml", SEED_TRACE),
        (SEED_SPEC, tmp_path / "missing.csv"),
        (SEED_SPEC, SEED_TRACE, "-o", tmp_path / "no" / "dir" / "r.json"),
        (SEED_SPEC, SEED_TRACE, "-o", tmp_path / "r.json", "--plot", tmp_path / "plot.txt"),
    ]
    for args in cases:
        p = _run(*args)
        assert p.returncode == 1, (args, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert p.stderr.startswith("fairpod: error: ")
