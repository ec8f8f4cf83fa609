"""The supervisors outlive the control plane: kill -9 the launcher, adopt with a new executor."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from fairpod.executors import ExecutorError, LocalExecutor, procs, state

from .helpers import PY, job, wait_exits, wait_for

LAUNCHER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from fairpod.executors import JobLaunch, LocalExecutor, ReplicaLaunch
    root, tmp = Path(sys.argv[1]), Path(sys.argv[2])
    ex = LocalExecutor(root)
    def launch(name, code):
        ex.launch(JobLaunch(job=name, team="t", attempt=0, command=[sys.executable, "-c", code],
                            checkpoint_dir=str(tmp / name), replicas=(ReplicaLaunch(rank=0, node="n0"),)))
    launch("long", "import os, time\\nfor _ in range(300):\\n    time.sleep(0.1)\\n    if os.path.exists(%r): break"
           % str(tmp / "release"))
    launch("short", "raise SystemExit(5)")
    print("launched", flush=True)
    time.sleep(120)
    """
)


def test_supervisor_survives_kill_9_of_the_launcher_and_is_adopted(root: Path, tmp_path: Path) -> None:
    launcher = subprocess.Popen(
        [PY, "-c", LAUNCHER, str(root), str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert launcher.stdout is not None
        assert launcher.stdout.readline() == "launched\n"
        long_dir, short_dir = root / "long" / "0" / "0", root / "short" / "0" / "0"
        wait_for((short_dir / state.STATUS).exists)  # ends while the control plane is "down"
        wait_for((long_dir / state.CHILD_PID).exists)
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=10)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(timeout=10)
    sup = state.read_pid(long_dir / state.SUPERVISOR_PID)
    child = state.read_pid(long_dir / state.CHILD_PID)
    assert sup and child and procs.alive(*sup) and procs.alive(*child)

    ex = LocalExecutor(root)
    try:
        (gone_while_down,) = ex.adopt()
        assert (gone_while_down.job, gone_while_down.returncode, gone_while_down.reason) == (
            "short",
            5,
            "exited 5",
        )
        assert ex.running() == {"long": 0}
        with pytest.raises(ExecutorError, match="still running"):  # never started twice
            ex.launch(job("long", [PY, "-c", "pass"], tmp_path))
        assert state.read_pid(long_dir / state.SUPERVISOR_PID) == sup
        assert state.read_pid(long_dir / state.CHILD_PID) == child
        (tmp_path / "release").touch()
        (e,) = wait_exits(ex, 1)
        assert (e.job, e.attempt, e.rank, e.returncode) == ("long", 0, 0, 0)
        assert ex.poll() == [] and ex.running() == {}
    finally:
        ex.close()
    with LocalExecutor(root) as again:  # reported exactly once, also across restarts
        assert again.adopt() == []
        assert again.running() == {}
        assert again.poll() == []
    wait_for(lambda: not procs.alive(*sup), 5)


def _writer(tmp_path: Path) -> list[str]:
    return [PY, "-c", f"open({str(tmp_path / 'ran')!r}, 'a').write('ran\\n')"]


def _unstarted(root: Path, tmp_path: Path, launched_at: float) -> Path:
    """The files a launcher leaves when it dies after writing launch.json and before its supervisor exists."""
    ex = LocalExecutor(root)
    try:
        spec = ex._spec(job("never", _writer(tmp_path), tmp_path), 0, 12345)
    finally:
        ex.close()
    rdir = root / "never" / "0" / "0"
    rdir.mkdir(parents=True)
    state.write_launch(rdir, {**spec, "launched_at": launched_at})
    return rdir


def test_a_replica_whose_supervisor_never_started_is_not_adopted_but_launched_again(root: Path, tmp_path: Path):
    rdir = _unstarted(root, tmp_path, launched_at=time.time())
    with LocalExecutor(root) as ex:
        assert ex.adopt() == [] and ex.running() == {}  # it never ran: no exit, nothing live
        assert not (rdir / state.LAUNCH).exists()
        ex.launch(job("never", _writer(tmp_path), tmp_path))
        (e,) = wait_exits(ex, 1)
        assert e.ok and (tmp_path / "ran").read_text() == "ran\n"


def test_an_old_run_without_a_supervisor_log_is_reported_not_a_crash_of_poll(root: Path, tmp_path: Path):
    _unstarted(root, tmp_path, launched_at=time.time() - 3600)
    with LocalExecutor(root) as ex:  # without adopt(): the run is taken as given up after STARTUP_TIMEOUT
        (e,) = ex.poll()
        assert (e.job, e.returncode, e.reason) == ("never", None, "supervisor failed to start")


def test_an_attempt_whose_launch_was_cut_between_two_replicas_is_undone(root: Path, tmp_path: Path):
    with LocalExecutor(root) as ex:
        ex.launch(job("cut", [PY, "-c", "import time; time.sleep(60)"], tmp_path, n=2))
        r0, r1 = root / "cut" / "0" / "0", root / "cut" / "0" / "1"
        wait_for(lambda: (r0 / state.CHILD_PID).exists() and (r1 / state.CHILD_PID).exists())
    sup0, child0 = state.read_pid(r0 / state.SUPERVISOR_PID), state.read_pid(r0 / state.CHILD_PID)
    for name in (state.CHILD_PID, state.SUPERVISOR_PID):  # as if rank 1 had never been started
        pid = state.read_pid(r1 / name)
        assert pid is not None
        os.kill(pid[0], signal.SIGKILL)
    wait_for(lambda: not procs.alive(*state.read_pid(r1 / state.SUPERVISOR_PID)))
    for f in r1.iterdir():
        f.unlink()
    r1.rmdir()
    assert sup0 and child0 and procs.alive(*sup0)
    with LocalExecutor(root) as ex:
        assert ex.adopt() == [] and ex.running() == {}  # rank 0 alone is no attempt: killed, undone
        wait_for(lambda: not procs.alive(*sup0) and not procs.alive(*child0))
        ex.launch(job("cut", [PY, "-c", "pass"], tmp_path, n=2))  # launched again, whole
        assert sorted(e.rank for e in wait_exits(ex, 2)) == [0, 1]
