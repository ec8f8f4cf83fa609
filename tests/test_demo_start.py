"""scripts/demo.sh says when fairpod is ready, and how long the demo took to get there: run with --no-install from
a copy of the script whose .venv holds this interpreter (no pip, nothing downloaded), it starts a real
``fairpod up`` in a private home and port, prints the ready line once the server answers, and exits."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx

from . import reaper
from .ports import free_port
from .server.conftest import fake_nvml

ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_says_when_it_is_ready(tmp_path: Path):
    repo = tmp_path / "checkout"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "demo.sh", repo / "scripts" / "demo.sh")
    venv = repo / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    # the entry point pip writes, with this interpreter (and this checkout's sources on PYTHONPATH)
    (venv / "fairpod").write_text(f"#!/bin/sh\nexec {sys.executable} -m fairpod.cli.main \"$@\"\n")
    (venv / "fairpod").chmod(0o755)
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(tmp_path), "FAIRPOD_HOME": str(home), "FAIRPOD_CONFIG": str(tmp_path / "cfg.json"),
           "FAIRPOD_NATIVE_BUILD": "0", "FAIRPOD_FAKE_NVML": str(fake_nvml(tmp_path / "no-gpus.json", [])),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    for k in ("FAIRPOD_URL", "FAIRPOD_TOKEN", "FAIRPOD_DB_URL"):
        env.pop(k, None)
    port = free_port()
    reaper.pidfile(home / "server.pid")  # the demo's fairpod up, a daemon: stopped below, or by the reaper
    reaper.runs(home / "runs")
    try:
        r = subprocess.run(["bash", str(repo / "scripts" / "demo.sh"), "--no-install", "--port", str(port)],
                           env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert r.returncode == 0, r.stderr + r.stdout
        lines = r.stdout.splitlines()
        ready = [ln for ln in lines if re.fullmatch(r"\[\d\d:\d\d:\d\d\] fairpod is ready, \d+ s after the demo "
                                                    r"started", ln)]
        assert len(ready) == 1, r.stdout
        assert "installing fairpod" not in r.stdout, r.stdout  # --no-install: no pip
        assert lines.index(ready[0]) < lines.index("Try:  source .venv/bin/activate"), r.stdout
        # ready means ready: the server answers now
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
    finally:
        subprocess.run([sys.executable, "-m", "fairpod.cli.main", "down"], env=env, capture_output=True,
                       timeout=60)


def test_no_install_without_an_installed_fairpod_says_so(tmp_path: Path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "demo.sh", tmp_path / "scripts" / "demo.sh")
    r = subprocess.run(["bash", str(tmp_path / "scripts" / "demo.sh"), "--no-install"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "--no-install: .venv/bin/fairpod is not there" in r.stdout, r.stdout + r.stderr
