"""``fairpod simulate``'s progress line: on stderr only, with ``--progress`` or when stderr is a terminal."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

from .helpers import SEED_SPEC, SEED_TRACE

CMD = [sys.executable, "-m", "fairpod.cli.main", "simulate", str(SEED_SPEC), str(SEED_TRACE)]


def test_progress_goes_to_stderr_and_the_json_report_on_stdout_stays_clean():
    p = subprocess.run([*CMD, "--progress"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["cluster"]["completed"] == 3
    lines = p.stderr.splitlines()
    assert lines and lines[-1].startswith("simulate: 1,140 s simulated, 3/3 jobs completed, "), p.stderr
    assert lines[-1].endswith(" jobs/s") and " s wall, " in lines[-1]


def test_no_progress_line_when_stderr_is_not_a_terminal():
    p = subprocess.run(CMD, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stderr == ""
    p = subprocess.run([*CMD, "--no-progress"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stderr == ""


def test_on_a_terminal_the_line_is_shown_by_default_and_rewritten_in_place():
    master, slave = pty.openpty()
    try:
        p = subprocess.run(CMD, stdout=subprocess.PIPE, stderr=slave, timeout=120)
        os.close(slave)
        slave = -1
        seen = b""
        for _ in range(1000):  # bounded: the child is gone, read what it left on the terminal
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: nothing more
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert p.returncode == 0
    assert json.loads(p.stdout)["cluster"]["completed"] == 3
    text = seen.decode()
    assert text.startswith("\r\x1b[Ksimulate: 1,140 s simulated, 3/3 jobs completed, ") and text.endswith("\n"), text
