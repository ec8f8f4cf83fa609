"""``fairpod up`` (in the background) and a server that is slow to start: a start that connects to a Ray cluster
waits for an agent on each node, as long as the machine is busy. ``up`` waits for the start itself (bounded by
``FAIRPOD_START_LIMIT``), says once that it is still waiting, and ``fairpod down`` stops a server that is still
starting. Before, ``up`` gave up after a fixed 30 s and stopped a server that was coming up, and ``down`` said
"fairpod is not running" until the server had finished starting (its PID file was written last).

The slow start is real time spent in the server's start: the ``sitecustomize`` below, on the server's
``PYTHONPATH``, sleeps ``FPTEST_SLOW_START`` seconds before the server makes its executor."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fairpod.executors import procs

from ..conftest import Server, wait_for

SLOW_START = '''
import importlib.abc, importlib.util, os, sys, time

class _SlowStart(importlib.abc.MetaPathFinder):
    """Once fairpod.server.runtime.wiring is imported, its make_executor first sleeps FPTEST_SLOW_START s."""

    def find_spec(self, name, path, target=None):
        if name != "fairpod.server.runtime.wiring":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            real = module.make_executor

            def make_executor(*a, **k):
                time.sleep(float(os.environ["FPTEST_SLOW_START"]))
                return real(*a, **k)

            module.make_executor = make_executor

        spec.loader.exec_module = exec_module
        return spec

if os.environ.get("FPTEST_SLOW_START"):
    sys.meta_path.insert(0, _SlowStart())
'''


def slow_server(tmp: Path, seconds: float) -> Server:
    s = Server(tmp)
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_START)
    s.env.update(FPTEST_SLOW_START=f"{seconds:g}",
                 PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    return s


def _server_pid(s: Server, up: subprocess.Popen) -> int | None:
    """The PID in the home's server.pid once the server (not ``up`` itself) has written it."""
    try:
        pid = int((s.home / "server.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if pid != up.pid else None


def test_up_waits_for_a_server_slower_than_30_s_to_start(tmp_path: Path):
    s = slow_server(tmp_path, 35)
    t0 = time.monotonic()
    r = s.cli("up", "--port", str(s.port), check=False)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        assert time.monotonic() - t0 >= 35
        assert "fairpod is up" in r.stdout
        still = [ln for ln in r.stderr.splitlines() if "is still starting" in ln]
        assert len(still) == 1 and str(s.home / "server.log") in still[0], r.stderr  # said once
        assert "Traceback" not in r.stderr
    finally:
        d = s.cli("down", check=False)
    assert "fairpod stopped" in d.stdout, d.stdout + d.stderr


def test_down_stops_a_server_that_is_still_starting(tmp_path: Path):
    s = slow_server(tmp_path, 600)
    up = subprocess.Popen([sys.executable, "-m", "fairpod.cli.main", "up", "--port", str(s.port)], env=s.env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pid = wait_for(lambda: _server_pid(s, up), 60, "the starting server's PID file")
        started = procs.start_time(pid)
        d = s.cli("down", check=False)
        assert d.returncode == 0 and f"fairpod stopped (pid {pid})" in d.stdout, d.stdout + d.stderr
        assert not procs.alive(pid, started)
        out, err = up.communicate(timeout=60)  # up sees its server end, and says so
        assert up.returncode == 1 and "fairpod is up" not in out, out + err
        assert "fairpod: error: the server did not come up" in err and "Traceback" not in err, err
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()


def test_up_stops_a_server_that_does_not_answer_within_the_start_limit(tmp_path: Path):
    s = slow_server(tmp_path, 600)
    s.env["FAIRPOD_START_LIMIT"] = "3"
    r = s.cli("up", "--port", str(s.port), check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith("fairpod: error: the server did not answer within 3 s (FAIRPOD_START_LIMIT); "
                            "stopping it (pid "), r.stderr
    pid = int(first.rsplit("(pid ", 1)[1].rstrip(")"))
    assert not procs.alive(pid, None)
    assert "fairpod is not running" in s.cli("down").stdout


def test_a_bad_start_limit_is_one_line(tmp_path: Path):
    s = Server(tmp_path)
    for bad in ("abc", "0", "-1", "inf", "nan"):
        s.env["FAIRPOD_START_LIMIT"] = bad
        r = s.cli("up", "--port", str(s.port), check=False)
        assert r.returncode == 2 and r.stderr == f"fairpod: error: FAIRPOD_START_LIMIT={bad!r}: give a number of " \
            "seconds > 0\n", r.stderr
        assert not s.home.exists()  # refused before anything is written
