"""The native engine (``fairpod.native``): a build is used only for the source it was built from, and the compiled
engine makes exactly the decisions of the Python one, on contended replays that touch every rule, and passes the
engine's own tests.

The build test compiles the engine for real (mypyc and a C compiler); it is skipped, with the reason, where either
is missing. It builds as ``fairpod up`` does, with two differences: the C compiler does not optimise
(``MYPYC_OPT_LEVEL=0``: the same decisions, 31 s of CPU instead of 55 s), and a ``PYTHONPATH`` of the user's is set
(the build once failed with one)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fairpod import native

from ..server.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
ITP = ROOT.parent / "shared" / "traces" / "itp"
# the first test builds the engine (a module fixture, counted in its time): minutes of mypyc on a busy 2-core machine
pytestmark = pytest.mark.timeout(1500)


def _env(build_root: Path, on: bool) -> dict[str, str]:
    return {**os.environ, "FAIRPOD_NATIVE_DIR": str(build_root), "FAIRPOD_NATIVE": "1" if on else "0"}


def _replay(args: list[str], env: dict[str, str], log: Path) -> dict:
    """``benchmarks/itp_replay.py ARGS``: the engine that ran, every applied decision, the cycles."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "itp_replay.py"), *args, "--decisions-out",
                          str(log)], env=env, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return {"engine": re.search(r"^engine\s+(.+?)(?:\s{3}|$)", out.stdout, re.M).group(1),
            "cycles": int(re.search(r"decisions in (\d+) cycles", out.stdout).group(1)),
            "lines": log.read_text().splitlines()}


# -- which build is loaded (no compiler needed) ---------------------------------------------------------------
def test_a_build_is_loaded_only_for_the_source_it_was_built_from(tmp_path, monkeypatch):
    monkeypatch.setenv("FAIRPOD_NATIVE_DIR", str(tmp_path))
    monkeypatch.delenv("FAIRPOD_NATIVE", raising=False)
    path: list[str] = []
    assert native.activate(path) is None and path == []  # no build at all
    d = tmp_path / native.source_hash()
    (d / "fairpod" / "governance").mkdir(parents=True)
    assert native.activate(path) is None and path == []  # a folder without its completion mark (a build cut short)
    (d / "fairpod-native.json").write_text("{}")
    assert native.activate(path) == d and path == [str(d / "fairpod" / "governance")]
    monkeypatch.setenv("FAIRPOD_NATIVE", "0")
    assert native.activate([]) is None  # turned off
    # an edited module has another hash, so the build of the old source is never loaded for it
    copy = tmp_path / "pkg"
    shutil.copytree(Path(native.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert native.source_hash(copy) == native.source_hash()
    for module in ("governance/preemption.py", "sim/run.py"):
        edited = tmp_path / "edited"
        shutil.rmtree(edited, ignore_errors=True)
        shutil.copytree(copy, edited)
        (edited / module).write_text((edited / module).read_text() + "\n# edited\n")
        assert native.source_hash(edited) != native.source_hash()


def test_status_says_which_engine_runs_and_why_a_build_cannot_be_made(tmp_path):
    env = {**os.environ, "FAIRPOD_NATIVE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "fairpod.native", "status", "--json"], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    info = json.loads(out.stdout)
    assert info["engine"] == "pure Python" and info["native"] is False and info["build"] is None
    assert info["builds_in"] == str(tmp_path) and info["can_build"] == (info["cannot_build_because"] is None)
    bad = subprocess.run([sys.executable, "-m", "fairpod.native", "frobnicate"], env=env, capture_output=True,
                         text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr and "Traceback" not in bad.stderr
    # with a build of this source, status says that a process started now runs it (without importing the engine)
    d = tmp_path / native.source_hash()
    (d / "fairpod" / "governance").mkdir(parents=True)
    (d / "fairpod-native.json").write_text("{}")
    out = subprocess.run([sys.executable, "-m", "fairpod.native", "status", "--json"], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    info = json.loads(out.stdout)
    assert info["engine"] == "native (mypyc)" and info["native"] is True and info["build"] == str(d)


def test_clean_removes_builds_and_nothing_else(tmp_path):
    env = {**os.environ, "FAIRPOD_NATIVE_DIR": str(tmp_path)}
    build = tmp_path / native.source_hash()
    (build / "fairpod").mkdir(parents=True)
    (tmp_path / f"{'0' * 20}.k3j2").mkdir()  # a build cut short while being written
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "other").mkdir()
    out = subprocess.run([sys.executable, "-m", "fairpod.native", "clean"], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    assert "removed 2 build(s)" in out.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "other"]


def test_a_build_that_cannot_be_written_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    env = {**os.environ, "FAIRPOD_NATIVE_DIR": str(tmp_path / "file" / "below")}
    out = subprocess.run([sys.executable, "-m", "fairpod.native", "build"], env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert out.returncode == 1 and out.stderr.startswith("error: cannot build the native engine")
    assert "Traceback" not in out.stderr


def _builders(root: Path) -> list[int]:
    """The build processes whose build folder is ``root`` (this test's own: no other process has it)."""
    mark = f"FAIRPOD_NATIVE_DIR={root}\0".encode()
    pids = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and b"fairpod.native" in (d / "cmdline").read_bytes() and \
                    mark in (d / "environ").read_bytes():
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def test_a_background_build_holds_its_lock_from_the_moment_it_is_started(tmp_path, monkeypatch):
    """Two ``fairpod up`` one right after the other start one build: the first holds the build folder's lock
    before it returns (it used to leave that to its build process, which at low priority on a busy machine took
    it seconds later, so the second start began a build too)."""
    if native.missing():
        pytest.skip(f"cannot build the native engine here: {native.missing()}")
    monkeypatch.setenv("FAIRPOD_NATIVE_DIR", str(tmp_path))
    monkeypatch.setenv("FAIRPOD_NATIVE_BUILD", "1")
    monkeypatch.delenv("FAIRPOD_NATIVE", raising=False)
    try:
        assert native.build_in_background().startswith("compiling the engine to C in the background")
        lock = os.open(tmp_path / "building.lock", os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):  # held, by the build's process now
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        finally:
            os.close(lock)
        assert native.build_in_background() == "the engine is being compiled to C in the background"
        assert len(wait_for(lambda: _builders(tmp_path), 30, "the build's process")) == 1
    finally:
        for pid in _builders(tmp_path):  # a minute of compiling this test does not need
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # its own session: mypyc and the compiler with it


# -- a real build -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    why = native.missing()
    if why:
        pytest.skip(f"cannot build the native engine here: {why}")
    root = tmp_path_factory.mktemp("native")
    # as users get it: `fairpod up` says what engine runs and starts the build in the background
    env = {**_env(root, True), "FAIRPOD_NATIVE_BUILD": "1", "MYPYC_OPT_LEVEL": "0",
           "PYTHONPATH": str(tmp_path_factory.mktemp("elsewhere"))}
    start = [sys.executable, "-c", "from fairpod import native; print(native.on_start())"]
    first = subprocess.run(start, env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    assert first.startswith("pure Python; compiling the engine to C in the background"), first
    again = subprocess.run(start, env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    mark, log = root / native.source_hash() / "fairpod-native.json", root / "build.log"
    assert mark.is_file() or "being compiled" in again, again  # one build at a time
    wait_for(lambda: mark.is_file() or "error" in (log.read_text() if log.exists() else ""), 900, "the build")
    assert mark.is_file(), log.read_text()[-3000:]
    done = subprocess.run(start, env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    assert done.strip() == "native (mypyc)"
    assert len(list(root.glob("*/fairpod-native.json"))) == 1
    return root


def _contended(tmp: Path, seed: int) -> tuple[Path, Path]:
    """A small contended cluster (16 x p4d, four teams, FairShare, TaskRanking) and two days of jobs that keep it
    oversubscribed: gangs of 1-4 nodes, priorities, checkpoints and minimum run times."""
    teams = [("a", 5, 10, 100), ("b", 4, 30, 100), ("c", 4, 60, 50), ("d", 3, 1, 200)]
    spec = {
        "cluster": {"name": "contended", "instance_groups": [
            {"name": "p4d", "instance_type": "ml.p4d.24xlarge", "count": 16}]},
        "policy": {"task_prioritization": "TaskRanking", "idle_compute_allocation": "FairShare",
                   "priority_classes": [{"name": "high", "weight": 100}, {"name": "low", "weight": 10}]},
        "teams": [{"name": n, "fair_share_weight": w, "sharing": {"strategy": "LendAndBorrow", "borrow_limit": b},
                   "quota": [{"instance_type": "ml.p4d.24xlarge", "count": q}]} for n, q, w, b in teams],
    }
    rng = random.Random(seed)
    rows = ["submit_time,team,duration,accelerators,nodes,priority,checkpoint_interval,min_runtime"]
    t = 0.0
    for _ in range(700):
        t += rng.expovariate(1 / 240)
        nodes = rng.choice([1, 1, 1, 1, 2, 2, 4])
        per = 8 if nodes > 1 else rng.choice([1, 2, 4, 8])
        rows.append(",".join(str(x) for x in (
            round(t), rng.choice("abcd"), round(rng.lognormvariate(8, 1.2)) + 60, per * nodes, nodes,
            rng.choice(["high", "low", "low", ""]), rng.choice(["", "", 600]), rng.choice(["", "", "", 300]))))
    (tmp / "spec.yaml").write_text(yaml.safe_dump(spec))
    (tmp / "trace.csv").write_text("\n".join(rows) + "\n")
    return tmp / "spec.yaml", tmp / "trace.csv"


def _policies(tmp: Path, seed: int) -> tuple[Path, Path]:
    """examples/policies/spec.yaml (lending and absolute borrow limits, per-user caps taking turns, a budget,
    FairShareHistory, priority classes) under a day of jobs, some of them elastic."""
    rng = random.Random(seed)
    rows = ["submit_time,team,duration,accelerators,nodes,priority,user,min_nodes,checkpoint_interval"]
    t = 0.0
    for _ in range(400):
        t += rng.expovariate(1 / 200)
        nodes = rng.choice([1, 1, 1, 2, 3])
        per = 4 if nodes > 1 else rng.choice([1, 2, 4])
        team = rng.choice(["john", "smith", "smith"])
        rows.append(",".join(str(x) for x in (
            round(t), team, round(rng.lognormvariate(7.5, 1)) + 60, per * nodes, nodes,
            rng.choice(["inference", "training", "training"]), rng.choice(["ann", "bob", "cy"]) if team == "smith"
            else "", 1 if nodes > 1 and rng.random() < 0.3 else "", rng.choice(["", 300]))))
    (tmp / "trace.csv").write_text("\n".join(rows) + "\n")
    return ROOT / "examples" / "policies" / "spec.yaml", tmp / "trace.csv"


@pytest.mark.parametrize("case", ["contended", "policies"])
def test_the_native_engine_makes_the_decisions_of_the_python_one(build, tmp_path, case):
    spec, trace = (_contended if case == "contended" else _policies)(tmp_path, seed=7)
    args = ["--spec", str(spec), "--trace", str(trace)]
    pure = _replay(args, _env(build, on=False), tmp_path / "pure.log")
    fast = _replay(args, _env(build, on=True), tmp_path / "native.log")
    assert pure["engine"] == "pure Python" and fast["engine"] == "native (mypyc)"
    kinds = {ln.split(" ", 2)[1] for ln in pure["lines"]}
    assert len(pure["lines"]) > 500 and {"Admit", "Wait", "Preempt"} <= kinds  # a busy replay, with preemptions
    assert fast["lines"] == pure["lines"] and fast["cycles"] == pure["cycles"]


@pytest.mark.skipif(not ITP.is_dir(), reason=f"no ITP traces at {ITP}")
def test_the_native_engine_makes_the_decisions_of_the_python_one_on_the_contended_itp_replay(build, tmp_path):
    args = ["--contended", "--trace", str(ITP), "--until", "172800"]
    pure = _replay(args, _env(build, on=False), tmp_path / "pure.log")
    fast = _replay(args, _env(build, on=True), tmp_path / "native.log")
    assert pure["engine"] == "pure Python" and fast["engine"] == "native (mypyc)"
    assert len(pure["lines"]) > 1000 and fast["lines"] == pure["lines"]


def test_the_engine_tests_pass_on_the_native_engine(build):
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/governance", "tests/sim",
         "--ignore", "tests/governance/test_native.py", "-x"],
        cwd=ROOT, env={**_env(build, True), "FAIRPOD_EXPECT_NATIVE": "1"}, capture_output=True, text=True,
        timeout=900, check=False)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]  # FAIRPOD_EXPECT_NATIVE: natively or not at all
    assert " passed" in out.stdout and " failed" not in out.stdout
