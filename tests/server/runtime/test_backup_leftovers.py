"""Backups leave nothing behind: no ``-wal``/``-shm`` side files in the state directory or beside the backup,
and a backup CLI that is stopped (SIGTERM) or killed (SIGKILL) mid-copy leaves no ``.part`` file for long."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ..conftest import SEED_SPEC, Server, wait_for

# the state directory's own files: clock.json is the control plane's clock anchor (fairpod.server.runtime.steadyclock)
STATE = {"fairpod.db", "fairpod.db-wal", "fairpod.db-shm", "server.log", "server.pid", "server.lock", "job-token.key",
         "clock.json", "runs", "checkpoints"}


def _extra(folder: Path, expected: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in expected)


def test_backups_leave_no_side_files(tmp_path: Path):
    s = Server(tmp_path, SEED_SPEC)
    out = tmp_path / "b"
    out.mkdir()
    s.start()
    try:
        s.submit(name="one", team="john", command=["true"])
        s.wait_state("one", "Succeeded")
        for i in range(3):
            s.cli("backup", str(out / f"live-{i}.db"))
        wait_for(lambda: not _extra(s.home, STATE), 10, "the server's temporary backup files to go")
    finally:
        s.kill(signal.SIGTERM)
    s.cli("backup", str(out / "stopped.db"))  # from the file, with the server stopped
    s.cli("restore", str(out / "live-0.db"))
    assert _extra(s.home, STATE) == [p.name for p in s.home.iterdir() if ".before-restore-" in p.name]
    assert sorted(p.name for p in out.iterdir()) == ["live-0.db", "live-1.db", "live-2.db", "stopped.db"]


def _backup_stuck(s: Server, dest: Path) -> tuple[subprocess.Popen, Path]:
    """A backup CLI that waits on the (stopped) server, once it has its .part file open."""
    env = {**s.env, "FAIRPOD_TOKEN": s.token}
    proc = subprocess.Popen([sys.executable, "-m", "fairpod.cli.main", "backup", str(dest)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    part = wait_for(lambda: next(iter(dest.parent.glob(f".{dest.name}.*.part")), None), 20, "the .part file")
    return proc, part


def test_a_stopped_or_killed_backup_cli_leaves_no_part_file(tmp_path: Path):
    s = Server(tmp_path, SEED_SPEC)
    out = tmp_path / "b"
    out.mkdir()
    s.start()
    assert s.proc is not None
    try:
        os.kill(s.proc.pid, signal.SIGSTOP)  # the server answers nothing: the CLI waits mid-backup
        try:
            proc, part = _backup_stuck(s, out / "x.db")
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
            assert not part.exists() and not (out / "x.db").exists()
            proc, part = _backup_stuck(s, out / "y.db")
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=20)
            assert part.exists()  # nothing runs on SIGKILL: the next backup into this folder removes it
        finally:
            os.kill(s.proc.pid, signal.SIGCONT)
        s.cli("backup", str(out / "z.db"))
        assert sorted(p.name for p in out.iterdir()) == ["z.db"]
    finally:
        s.kill(signal.SIGTERM)
