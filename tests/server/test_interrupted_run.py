"""An interrupted run leaves nothing behind: a child pytest that has started a real ``fairpod up`` with a replica
running (and, under pytest-xdist workers, a Ray node; tests/server/interrupted.py) is ended as a CI job's timeout or
a cancelled job ends it: SIGTERM to the pytest process alone (under xdist, its controller), which ended it at once,
no fixture's teardown run. Once it has exited, no process it started may be left. (Ctrl-C, SIGINT to pytest and its
workers, ran the teardowns already; it takes the same path now.)

What counts as started by the child, found by what the run gave them and not by a name: the environment variable
``FAIRPOD_TEST_MARK`` with a value drawn for this test (every process the child runs inherits it: servers, fork
servers, supervisors, Ray's processes) and, for the replicas, whose environment the supervisor rebuilds, the
cgroup subtree the child's replicas are made in (``FAIRPOD_CGROUP_ROOT``, drawn for this test too). What the
interrupted child did not stop is killed here by those same PIDs, so this test leaves nothing either."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fairpod.executors import procs
from fairpod.sandbox import cgroups

from ..conftest import subtree_root
from ..ray.cluster import beside

ROOT = Path(__file__).resolve().parents[2]
MARK = "FAIRPOD_TEST_MARK"


def marked(value: str) -> set[int]:
    """The live processes whose environment holds ``FAIRPOD_TEST_MARK=value``."""
    want = f"{MARK}={value}\0".encode()
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if want in (d / "environ").read_bytes() and procs.start_time(int(d.name)) is not None:
                    out.add(int(d.name))
            except OSError:
                continue
    return out


def in_subtree(root: str | None) -> set[int]:
    """The live processes in the cgroup subtree ``root`` (``FAIRPOD_CGROUP_ROOT``) on every controller."""
    if root is None:
        return set()
    out = set()
    for b in _bases(root):
        for f in b.rglob("cgroup.procs") if b.is_dir() else ():
            try:
                out.update(int(p) for p in f.read_text().split())
            except OSError:
                continue
    return {p for p in out if procs.start_time(p) is not None}


def _bases(root: str) -> list[Path]:
    old = os.environ.get(cgroups.ROOT_ENV)
    os.environ[cgroups.ROOT_ENV] = root
    try:
        return list(cgroups.detect().bases.values())
    except cgroups.CgroupError:
        return []
    finally:
        if old is None:
            del os.environ[cgroups.ROOT_ENV]
        else:
            os.environ[cgroups.ROOT_ENV] = old


def _left(value: str, root: str | None) -> dict[int, str]:
    def cmd(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160]
        except OSError:
            return "?"
    return {p: cmd(p) for p in marked(value) | in_subtree(root)}


@pytest.mark.parametrize("workers", [["-n", "2"], ["-p", "no:xdist"]], ids=["under-xdist", "alone"])
def test_a_run_ended_by_sigterm_leaves_no_process(tmp_path: Path, workers: list[str]) -> None:
    value = uuid.uuid4().hex
    ready = tmp_path / "ready"
    ready.mkdir()
    root = subtree_root(f"interrupted-{value[:8]}")
    env = {**os.environ, MARK: value, "FAIRPOD_TEST_READY_DIR": str(ready),
           "FAIRPOD_TEST_LOOPBACK_NET": beside(50),  # its Ray node beside the suite's test clusters
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}
    for k in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS"):
        env.pop(k, None)
    if root is not None:
        env[cgroups.ROOT_ENV] = root
    want = {"server", "ray"} if "-n" in workers else {"server"}
    tests = ["tests/server/interrupted.py::test_a_server_with_a_replica"] + \
        (["tests/server/interrupted.py::test_a_ray_node"] if "ray" in want else [])
    out = tmp_path / "child.out"
    with out.open("wb") as log:
        child = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *workers,
                                  "--basetemp", str(tmp_path / "basetemp"), *tests],
                                 cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while {p.name for p in ready.iterdir()} != want:
            assert child.poll() is None, f"the child pytest ended ({child.returncode}):\n{out.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"not up within 240 s:\n{out.read_text()[-3000:]}"
            time.sleep(0.2)
        before = _left(value, root)
        assert len(before) >= 4, before  # the server, its fork server, a supervisor, the replica, ...
        child.send_signal(signal.SIGTERM)  # to pytest alone (under xdist, its controller), as a job's timeout does
        try:
            child.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the interrupted child pytest did not end within 120 s:\n{out.read_text()[-3000:]}")
        left = _left(value, root)
        for _ in range(20):  # a process SIGKILLed just before the child exited may still be ending
            if not left:
                break
            time.sleep(0.1)
            left = _left(value, root)
        assert not left, f"the interrupted run left {len(left)} of {len(before)} processes: {left}\n" \
                         f"{out.read_text()[-2000:]}"
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
        for _ in range(50):
            if not (pids := set(_left(value, root))):
                break
            procs.signal_all(pids, signal.SIGKILL)
            time.sleep(0.1)
        if root is not None:
            for b in _bases(root):
                if b.is_dir():
                    for d in sorted((p for p in b.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [b]:
                        try:
                            d.rmdir()  # a cgroup: removed once no process and no child group is left in it
                        except OSError:
                            pass
