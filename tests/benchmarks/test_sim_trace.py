"""benchmarks/sim_trace.py, the seeded trace generator for ``fairpod simulate`` at datacenter size, at a small
size: the same seed gives the same file, the trace replays on the 10,000-node spec with the progress line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GEN = [sys.executable, str(ROOT / "benchmarks" / "sim_trace.py")]
SPEC = ROOT / "examples" / "datacenter" / "spec.yaml"


def test_a_small_trace_is_reproducible_and_replays_on_the_datacenter_spec(tmp_path: Path):
    a, b, c = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    for path, seed in ((a, "7"), (b, "7"), (c, "8")):
        r = subprocess.run([*GEN, "--jobs", "120", "--hours", "0.01", "--seed", seed, "-o", str(path)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    rows = a.read_text().splitlines()
    assert rows[0] == "submit_time,team,duration,accelerators,nodes,instance_type" and len(rows) == 121
    times = [float(r.split(",")[0]) for r in rows[1:]]
    assert times == sorted(times) and times[-1] <= 36.0 + 1e-9
    out = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "simulate", str(SPEC), str(a), "-o", str(out),
                        "--progress"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["cluster"]["completed"] == 120
    assert r.stderr.splitlines()[-1].startswith("simulate: ") and "120/120 jobs completed" in r.stderr
    assert "120/120 jobs completed" in r.stdout


def test_bad_sizes_are_one_line_on_stderr(tmp_path: Path):
    r = subprocess.run([*GEN, "--jobs", "0", "-o", str(tmp_path / "t.csv")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == "sim_trace: --jobs must be > 0, got 0"
    r = subprocess.run([*GEN, "-o", str(tmp_path / "no" / "t.csv")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().endswith("no such directory " + repr(str(tmp_path / "no")))
