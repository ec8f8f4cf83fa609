"""A full disk under FAIRPOD_HOME, for real: the home is a small tmpfs of the test's own, filled to the last
block. Writes answer 503 "disk full", /healthz says unhealthy, the metric says so; the loop lives on; a job that
exits 0 while the disk is full ends Succeeded once space is back, also when the server was killed meanwhile."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from ... import httpclient
from ..conftest import SEED_SPEC, Server, wait_for

# a job that runs until the test creates the file "gate" (outside the full disk)
_WAIT = "touch {tmp}/started-{name}; while [ ! -e {tmp}/gate ]; do sleep 0.1; done"


def _mount_tmpfs(where: Path, size: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a file system of the test's own needs root")
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")


def _fill(path: Path) -> None:
    """Write ``path`` until the file system has not one block left."""
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 20, 4096, 512):
            block = b"\0" * chunk
            for _ in range(1_000_000):
                try:
                    f.write(block)
                except OSError as e:
                    assert e.errno == errno.ENOSPC
                    break


def _metrics(s: Server) -> str:
    return httpclient.get(s.url + "/metrics", headers={"Authorization": f"Bearer {s.token}"}, timeout=5).text


def _health(s: Server) -> httpx.Response:
    return httpclient.get(s.url + "/healthz", timeout=5)


def test_a_full_disk_is_said_survived_and_loses_no_exit(tmp_path: Path):
    s = Server(tmp_path, SEED_SPEC)
    _mount_tmpfs(s.home, "48m")
    fill = s.home / "fill"
    try:
        s.start()
        gate = tmp_path / "gate"  # outside the full disk: the jobs end when the test says so
        for name in ("during", "across-restart"):
            s.submit(name=name, team="john", command=["sh", "-c", _WAIT.format(tmp=tmp_path, name=name)])
            wait_for(lambda name=name: (tmp_path / f"started-{name}").exists(), 20, f"{name} to run")
        _fill(fill)
        r = None
        for i in range(200):  # until a write needs a block (SQLite may still have room in its files)
            r = s.api("POST", "/jobs", json={"name": f"more-{i}", "team": "smith", "command": ["true"],
                                             "env": {"PAD": "x" * 60_000}})
            if r.status_code != 201:
                break
        assert r is not None and r.status_code == 503, r.text if r is not None else None
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.json()["title"] == "disk full" and "no space left" in r.json()["detail"].lower(), r.json()
        h = _health(s)
        assert h.status_code == 503 and h.json()["disk_full"] is True, h.text
        assert "fairpod_disk_full 1.0" in _metrics(s)
        gate.write_text("go")  # both jobs exit 0 now, with no space to record it
        assert s.job("during")["state"] == "Running"  # not failed: its exit is kept until it can be written
        s.kill(signal.SIGKILL)  # and the server dies while the disk is full
        fill.unlink()
        s.start()
        assert s.wait_state("during", "Succeeded", 60)["reason"] == "all replicas exited 0"
        assert s.wait_state("across-restart", "Succeeded", 60)
        assert _health(s).status_code == 200
    finally:
        s.kill(signal.SIGTERM)
        s.kill_replicas()
        subprocess.run(["umount", "-l", str(s.home)], check=False)


def test_the_loop_lives_on_and_resumes_when_space_is_back(tmp_path: Path):
    s = Server(tmp_path, SEED_SPEC)
    _mount_tmpfs(s.home, "48m")
    fill = s.home / "fill"
    gate = tmp_path / "gate"
    try:
        s.start()
        s.submit(name="during", team="john", command=["sh", "-c", _WAIT.format(tmp=tmp_path, name="during")])
        wait_for(lambda: (tmp_path / "started-during").exists(), 20, "the job to run")
        _fill(fill)
        for i in range(200):
            r = s.api("POST", "/jobs", json={"name": f"more-{i}", "team": "smith", "command": ["true"],
                                             "env": {"PAD": "x" * 60_000}})
            if r.status_code != 201:
                break
        assert r.status_code == 503, r.text
        gate.write_text("go")
        assert s.job("during")["state"] == "Running"
        fill.unlink()
        wait_for(lambda: _health(s).status_code == 200, 20, "health to be good again")
        assert s.wait_state("during", "Succeeded", 30)["reason"] == "all replicas exited 0"
        s.submit(name="after", team="john", command=["true"])
        s.wait_state("after", "Succeeded", 30)
        assert "fairpod_disk_full 0.0" in _metrics(s)
    finally:
        s.kill(signal.SIGTERM)
        s.kill_replicas()
        subprocess.run(["umount", "-l", str(s.home)], check=False)


def test_up_on_a_full_disk_after_a_kill_says_so_in_one_line(tmp_path: Path):
    """``fairpod up --spec`` (a changed spec: a write) after kill -9 with the disk full to the last block, a job
    running: ``up`` says so in one line naming the home and what to free, never SQLAlchemy's traceback of the
    failed commit (as it did; ``--foreground`` goes the same way); once space is back it starts and the job is
    still known."""
    s = Server(tmp_path, SEED_SPEC)
    _mount_tmpfs(s.home, "24m")
    fill = s.home / "fill"
    changed = tmp_path / "changed.yaml"
    changed.write_text(SEED_SPEC.read_text().replace("name: demo", "name: demo-changed", 1))
    assert changed.read_text() != SEED_SPEC.read_text()
    try:
        s.start()
        s.submit(name="held", team="john", command=["sh", "-c", _WAIT.format(tmp=tmp_path, name="held")])
        wait_for(lambda: (tmp_path / "started-held").exists(), 20, "the job to run")
        s.kill(signal.SIGKILL)
        _fill(fill)
        r = s.cli("up", "--port", str(s.port), "--spec", str(changed), check=False)
        said = (r.stdout + r.stderr).strip()
        assert r.returncode == 1 and "Traceback" not in said and len(said.splitlines()) == 1, said
        assert r.stderr.startswith(f"fairpod: error: no space left under {s.home} (database or disk is full): "
                                   "free space there"), said
        fill.unlink()
        (tmp_path / "gate").write_text("go")
        s.start()
        assert s.wait_state("held", "Succeeded", 60)["reason"] == "all replicas exited 0"
    finally:
        s.kill(signal.SIGTERM)
        s.kill_replicas()
        subprocess.run(["umount", "-l", str(s.home)], check=False)


def test_a_first_up_on_a_full_disk_says_so_and_leaves_no_empty_database(tmp_path: Path):
    """The first ``fairpod up`` in a home on a full disk: one line, and no 0-byte ``fairpod.db`` left behind (the
    next ``up`` refused it as "not a fairpod database: move it away"); with space back, ``up`` starts."""
    s = Server(tmp_path, SEED_SPEC)
    _mount_tmpfs(s.home, "8m")
    fill = s.home / "fill"
    try:
        _fill(fill)
        r = s.cli("up", "--port", str(s.port), "--spec", str(SEED_SPEC), check=False)
        assert r.returncode == 1 and len((r.stdout + r.stderr).strip().splitlines()) == 1, r.stdout + r.stderr
        assert f"no space left under {s.home}" in r.stderr, r.stderr
        assert not (s.home / "fairpod.db").exists()
        fill.unlink()
        s.start()
    finally:
        s.kill(signal.SIGTERM)
        subprocess.run(["umount", "-l", str(s.home)], check=False)
