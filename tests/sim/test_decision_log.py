"""``benchmarks/itp_replay.py --decisions-out``: every decision a replay applies, one a line, the same on every run
(the log two engine versions are compared with)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import ITP_DIR, ROOT


def _replay(tmp: Path, name: str) -> tuple[str, list[str]]:
    log = tmp / name
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "itp_replay.py"), "--contended", "--trace", str(ITP_DIR),
         "--until", "86400", "--decisions-out", str(log)],
        capture_output=True, text=True, timeout=300, check=True).stdout
    return out, log.read_text().splitlines()


@pytest.mark.skipif(not ITP_DIR.is_dir(), reason=f"no ITP traces at {ITP_DIR}")
def test_the_decision_log_has_every_applied_decision_and_is_the_same_on_every_run(tmp_path):
    out, lines = _replay(tmp_path, "a.log")
    decisions = int(re.search(r"engine cpu .*\((\d+) decisions in", out).group(1))
    preemptions = int(re.search(r"^preemptions\s+(\d+)", out, re.M).group(1))
    assert decisions > 100 and len(lines) == decisions
    kinds = [ln.split(" ", 3)[1] for ln in lines]
    assert set(kinds) <= {"Admit", "Preempt", "Wait", "Grow", "Shrink"}
    assert kinds.count("Preempt") == preemptions
    times = [float(ln.split(" ", 1)[0]) for ln in lines]
    assert times == sorted(times)  # cycle by cycle
    admits = [ln.split(" ") for ln in lines if ln.split(" ", 2)[1] == "Admit"]
    assert admits and all(re.fullmatch(r"p4d-\d+(,p4d-\d+)*", a[3]) for a in admits)  # the nodes it runs on
    _, again = _replay(tmp_path, "b.log")
    assert again == lines
