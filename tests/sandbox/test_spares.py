"""Spares of replicas for recovery from peers (fairpod.executors.standby, issue 49), on the real local executor with
the whole sandbox:
beside each replica of a job whose launch has ``spare`` (``--peer-recovery``), a standby supervisor holds a spare
of its process inside the replica's sandbox; a replica restarted in place is that spare, started before the fault,
running the program with the new launch's environment. The spare preloads a standard module here (no torch)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.executors import LocalExecutor, procs, state
from fairpod.sandbox import namespaces

from ..executors.helpers import PY, job, wait_exits, wait_for
from .test_files import made_users  # noqa: F401 - the fixture: the team's user made here is removed after

MARK = b"\0-c\0# fairpod spare"  # python -c <the spare's program>, whose first line is this comment


def spares(name: str, rank: int) -> list[int]:
    """Host PIDs of the spare programs in a cgroup of replica ``rank`` (attempt 0) of job ``name``."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            if (d.name.isdigit() and (d / "cmdline").read_bytes().startswith(PY.encode() + MARK)
                    and f"/{name}.0.{rank}." in (d / "cgroup").read_text()):
                out.append(int(d.name))
        except OSError:
            continue
    return out


def uid(pid: int) -> str:
    return next(ln.split()[1] for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("Uid:"))


def text(p: Path) -> str:
    return p.read_text(errors="replace") if p.exists() else ""


@pytest.fixture
def prog_dir() -> Iterator[Path]:
    """Where the job's program lies: a directory the team's user may enter (pytest's are 0700), outside the runs'
    directory (which no job may reach)."""
    d = Path(tempfile.mkdtemp(prefix="fairpod-spare-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_replica_restarted_in_place_is_its_spare_started_before_the_fault(
        full_sandbox: None, made_users: None, ex: LocalExecutor, prog_dir: Path,  # noqa: F811
        tmp_path: Path) -> None:
    if why := namespaces.supported():
        pytest.skip(why)
    root = ex.root
    prog = prog_dir / "prog.py"
    prog.write_text("import os, sys, time\n"
                    "print('argv', sys.argv[1:], 'restarts', os.environ.get('FAIRPOD_REPLICA_RESTARTS', '0'),\n"
                    "      'preloaded', 'wave' in sys.modules, 'pid', os.getpid(), flush=True)\n"
                    "time.sleep(600)\n")
    j = job("sp", [PY, str(prog), "--x"], tmp_path, n=2, spare=True, workdir=str(prog.parent),
            env={"FAIRPOD_SPARE_PRELOAD": "wave"})
    ex.launch(j)
    log1 = root / "sp" / "0" / "1" / state.OUTPUT
    wait_for(lambda: "fairpod spare: ready, wave imported" in text(log1) and "restarts 0" in text(log1), 60)
    wait_for(lambda: len(spares("sp", 1)) == 1, 10)
    (spare,) = spares("sp", 1)
    first = state.read_pid(root / "sp" / "0" / "1" / state.CHILD_PID)
    assert first is not None
    os.kill(first[0], signal.SIGKILL)  # the fault: the replica's process (its namespace goes with it)
    t_fault = time.time()
    (lost,) = wait_exits(ex, 1, 30)
    assert lost.rank == 1 and lost.signal == signal.SIGKILL, lost
    ex.restart_replicas(dataclasses.replace(j, replicas=(j.replicas[1],), world=2,
                                            env={**j.env, "FAIRPOD_REPLICA_RESTARTS": "1"}))
    # (the whole line: print writes its words one by one to an unbuffered stream, and a read may fall between them)
    wait_for(lambda: any(ln.startswith("argv") and "restarts 1" in ln for ln in text(log1).splitlines(True)
                         if ln.endswith("\n")), 30)
    # the replacement is the spare: the same process, started before the fault, running the program (pid 2 of its
    # own PID namespace), with its module imported ahead and the new launch's environment
    assert "argv ['--x'] restarts 1 preloaded True pid 2" in text(log1), text(log1)
    assert "in its spare (started" in text(log1)
    btime = next(float(ln.split()[1]) for ln in Path("/proc/stat").read_text().splitlines() if ln.startswith("btime"))
    assert btime + procs.start_time(spare) / os.sysconf("SC_CLK_TCK") < t_fault  # type: ignore[operator]
    new = state.read_pid(root / "sp" / "0" / "1" / state.CHILD_PID)
    assert new is not None and procs.alive(*new) and new[0] != first[0]
    ppid = int(Path(f"/proc/{spare}/stat").read_text().rsplit(")", 1)[1].split()[1])  # its namespace's init
    assert int(Path(f"/proc/{ppid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == new[0]
    # inside the replica's sandbox: the cgroup of the replica's child (the one its supervisor reads and removes),
    # the team's user as its peer's program, its own PID namespace
    assert Path(f"/proc/{spare}/cgroup").read_text() == Path(f"/proc/{new[0]}/cgroup").read_text()
    zero = state.read_pid(root / "sp" / "0" / "0" / state.CHILD_PID)
    assert zero is not None
    (prog0,) = [p for p in procs.descendants(zero[0]) if b"prog.py" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert uid(spare) == uid(prog0) and os.readlink(f"/proc/{spare}/ns/pid") not in (
        os.readlink(f"/proc/{prog0}/ns/pid"), os.readlink("/proc/self/ns/pid"))
    # a new spare stands by for the next failure, in a cgroup of its own
    wait_for(lambda: len(spares("sp", 1)) == 2, 30)
    (nxt,) = [p for p in spares("sp", 1) if p != spare]
    assert Path(f"/proc/{nxt}/cgroup").read_text() != Path(f"/proc/{spare}/cgroup").read_text()
    # the job ends: every spare ends with it (their standbys see every replica of the attempt ended)
    ex.stop("sp", 0, 0.0)
    wait_exits(ex, 2, 30)
    wait_for(lambda: not spares("sp", 0) and not spares("sp", 1), 30)
