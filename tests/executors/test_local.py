"""LocalExecutor with real processes: environment, logs, stop, whole-tree kill, failures, exit codes."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from fairpod.executors import (
    Executor,
    ExecutorError,
    JobLaunch,
    LocalExecutor,
    ReplicaLaunch,
    follow_log,
    state,
)

from .helpers import PY, gone, job, kill_pids, wait_exits, wait_for

DUMP_ENV = (
    "import json, os, sys; keys = sys.argv[1].split(',');"
    "d = {k: os.environ.get(k) for k in keys}; d['cwd'] = os.getcwd();"
    "open(os.path.join(os.environ['FAIRPOD_CHECKPOINT_DIR'], 'env-' + os.environ['RANK'] + '.json'), 'w')"
    ".write(json.dumps(d))"
)
KEYS = (
    "FAIRPOD_JOB,FAIRPOD_TEAM,RANK,NODE_RANK,WORLD_SIZE,NNODES,MASTER_ADDR,MASTER_PORT,CUDA_VISIBLE_DEVICES,"
    "FAIRPOD_ACCELERATORS,FAIRPOD_NODE,FAIRPOD_CHECKPOINT_DIR,FAIRPOD_RESTART_COUNT,USER_VAR,PYTHONUNBUFFERED"
)


def test_is_an_executor(ex: LocalExecutor) -> None:
    assert isinstance(ex, Executor)
    assert ex.name == "local"


def test_environment_of_each_replica(ex: LocalExecutor, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    ckpt = tmp_path / "ckpt" / "team-a" / "env-job"  # <checkpoint root>/<team>/<job>, as the control plane lays it out
    reps = (
        ReplicaLaunch(rank=0, node="gpu-0", accelerators=(0, 1), real_gpus=True),
        ReplicaLaunch(rank=1, node="gpu-1", accelerators=(2, 3), real_gpus=True),
    )
    ex.launch(
        JobLaunch(
            job="env-job",
            team="team-a",
            attempt=2,
            command=[PY, "-c", DUMP_ENV, KEYS],
            env={"USER_VAR": "hello", "RANK": "overridden?"},
            workdir=str(work),
            checkpoint_dir=str(ckpt),
            replicas=reps,
        )
    )
    ex.launch(
        JobLaunch(
            job="virt",
            team="team-b",
            attempt=0,
            command=[PY, "-c", DUMP_ENV, KEYS],
            checkpoint_dir=str(tmp_path / "ckpt" / "virt"),
            replicas=(ReplicaLaunch(rank=0, node="v0", accelerators=(5,)),),
        )
    )
    exits = wait_exits(ex, 3)
    assert all(e.returncode == 0 for e in exits), exits
    envs = [json.loads((ckpt / f"env-{r}.json").read_text()) for r in (0, 1)]
    for r, env in enumerate(envs):
        assert env["FAIRPOD_JOB"] == "env-job" and env["FAIRPOD_TEAM"] == "team-a"
        assert env["RANK"] == env["NODE_RANK"] == str(r)
        assert env["WORLD_SIZE"] == env["NNODES"] == "2"
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert env["FAIRPOD_NODE"] == f"gpu-{r}"
        assert env["FAIRPOD_CHECKPOINT_DIR"] == str(ckpt)
        assert env["FAIRPOD_RESTART_COUNT"] == "2"
        assert env["USER_VAR"] == "hello"
        assert env["PYTHONUNBUFFERED"] == "1"
        assert env["cwd"] == str(work)
    assert envs[0]["CUDA_VISIBLE_DEVICES"] == envs[0]["FAIRPOD_ACCELERATORS"] == "0,1"
    assert envs[1]["CUDA_VISIBLE_DEVICES"] == envs[1]["FAIRPOD_ACCELERATORS"] == "2,3"
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"] and 0 < int(envs[0]["MASTER_PORT"]) < 65536
    virt = json.loads((tmp_path / "ckpt" / "virt" / "env-0.json").read_text())
    assert virt["FAIRPOD_ACCELERATORS"] == "5" and virt["FAIRPOD_TEAM"] == "team-b"
    # virtual nodes: CUDA_VISIBLE_DEVICES is left as the executor has it
    assert virt["CUDA_VISIBLE_DEVICES"] == os.environ.get("CUDA_VISIBLE_DEVICES")
    assert virt["MASTER_PORT"] != envs[0]["MASTER_PORT"]


def test_logs_per_replica_and_per_attempt(ex: LocalExecutor, tmp_path: Path) -> None:
    say = "import os, sys; r = os.environ['RANK']; print('out', r, os.environ['FAIRPOD_RESTART_COUNT']); print('err', r, file=sys.stderr)"
    ex.launch(job("logs", [PY, "-c", say], tmp_path, n=2))
    wait_exits(ex, 2)
    for r in (0, 1):
        path = ex.log_path("logs", r)
        assert path is not None
        text = path.read_text()
        assert f"out {r} 0\n" in text and f"err {r}\n" in text
        assert f"out {1 - r}" not in text
        assert "exited 0" in text.splitlines()[-1]
    ex.launch(job("logs", [PY, "-c", say], tmp_path, n=2, attempt=1))
    wait_exits(ex, 2)
    assert "out 0 1\n" in ex.log_path("logs", 0).read_text()  # type: ignore[union-attr]
    assert "out 0 0\n" in ex.log_path("logs", 0, attempt=0).read_text()  # type: ignore[union-attr]
    ex.launch(job("logs", [PY, "-c", say], tmp_path, n=2, attempt=1))  # the same attempt again: appended
    wait_exits(ex, 2)
    text = ex.log_path("logs", 0).read_text()  # type: ignore[union-attr]
    assert text.count("==== fairpod: job logs") == 2 and text.count("out 0 1\n") == 2
    assert ex.log_path("logs", 5) is None and ex.log_path("nope") is None


def test_follow_streams_until_the_replica_ends(ex: LocalExecutor, tmp_path: Path) -> None:
    slow = "import time\nfor i in range(5):\n    print('line', i)\n    time.sleep(0.1)\n"
    ex.launch(job("follow", [PY, "-c", slow], tmp_path))
    t0 = time.monotonic()
    chunks = list(ex.follow("follow", 0, poll_interval=0.05))
    assert time.monotonic() - t0 < 15
    text = "".join(chunks)
    assert len(chunks) >= 2  # it streamed, not one read at the end
    assert all(f"line {i}\n" in text for i in range(5)) and "replica ended" in text
    assert wait_exits(ex, 1)[0].returncode == 0


def test_follow_log_of_a_file(tmp_path: Path) -> None:
    f = tmp_path / "x.log"
    f.write_bytes("héllo\n".encode())
    assert "".join(follow_log(f, stop=lambda: True)) == "héllo\n"
    assert "".join(follow_log(f, stop=lambda: True, from_start=False)) == ""
    assert "".join(follow_log(tmp_path / "missing.log", stop=lambda: True)) == ""


def _ready(tmp_path: Path, name: str) -> Path:
    return tmp_path / "ckpt" / name / "ready"


TRAP = (
    "import os, signal, time\n"
    "d = os.environ['FAIRPOD_CHECKPOINT_DIR']\n"
    "def term(s, f):\n"
    "    open(os.path.join(d, 'checkpoint'), 'a').write('saved\\n')\n"
    "    time.sleep(0.3)  # a second SIGTERM would re-enter the handler\n"
    "    raise SystemExit(0)\n"
    "signal.signal(signal.SIGTERM, term)\n"
    "open(os.path.join(d, 'ready'), 'w').close()\n"
    "for _ in range(600):\n"
    "    time.sleep(0.1)\n"
)
IGNORE = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "open(os.path.join(os.environ['FAIRPOD_CHECKPOINT_DIR'], 'ready'), 'w').close()\n"
    "for _ in range(600):\n"
    "    time.sleep(0.1)\n"
)


def test_stop_runs_the_jobs_sigterm_handler(ex: LocalExecutor, tmp_path: Path) -> None:
    ex.launch(job("trap", [PY, "-c", TRAP], tmp_path, grace_seconds=20))
    wait_for(_ready(tmp_path, "trap").exists)
    t0 = time.monotonic()
    ex.stop("trap", 0, 20)
    assert time.monotonic() - t0 < 1.0  # non-blocking
    (e,) = wait_exits(ex, 1)
    assert (e.returncode, e.signal, e.reason) == (0, None, "exited 0")
    assert time.monotonic() - t0 < 5  # well before the grace period
    assert (tmp_path / "ckpt" / "trap" / "checkpoint").read_text() == "saved\n"  # SIGTERM came once


def test_stop_kills_after_the_grace_period(ex: LocalExecutor, tmp_path: Path) -> None:
    ex.launch(job("stubborn", [PY, "-c", IGNORE], tmp_path, grace_seconds=30))
    wait_for(_ready(tmp_path, "stubborn").exists)
    t0 = time.monotonic()
    ex.stop("stubborn", 0, 1.0)
    assert ex.running() == {"stubborn": 0}
    (e,) = wait_exits(ex, 1)
    took = time.monotonic() - t0
    assert (e.returncode, e.signal, e.reason) == (None, signal.SIGKILL, "killed by SIGKILL")
    assert 0.9 <= took < 6, took
    assert ex.running() == {}


# The command starts a grandchild in a new session, records its PID, then waits (or exits at once).
GRANDCHILD = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "p = os.path.join(os.environ['FAIRPOD_CHECKPOINT_DIR'], 'grandchild')\n"
    "open(p + '.tmp', 'w').write(str(os.getpid()))\n"
    "os.replace(p + '.tmp', p)\n"
    "time.sleep(120)\n"
)
SETSID = (
    "import os, subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', sys.argv[2]], start_new_session=True)\n"
    "for _ in range(200):\n"
    "    if os.path.exists(os.path.join(os.environ['FAIRPOD_CHECKPOINT_DIR'], 'grandchild')):\n"
    "        break\n"
    "    time.sleep(0.05)\n"
    "if sys.argv[1] == 'wait':\n"
    "    time.sleep(120)\n"
)


@pytest.mark.parametrize("mode", ["wait", "exit"])
def test_setsid_grandchild_is_killed_too(ex: LocalExecutor, tmp_path: Path, mode: str) -> None:
    name = f"tree-{mode}"
    grace = 0.5 if mode == "wait" else 2.0  # "exit": long enough to see the grandchild alive first
    ex.launch(job(name, [PY, "-c", SETSID, mode, GRANDCHILD], tmp_path, grace_seconds=grace))
    pidfile = tmp_path / "ckpt" / name / "grandchild"
    wait_for(lambda: pidfile.exists() and pidfile.read_text())
    gpid = int(pidfile.read_text())
    try:
        assert not gone(gpid)
        if mode == "wait":
            ex.stop(name, 0, 0.5)
        (e,) = wait_exits(ex, 1)  # "exit": the command ended; what it left behind is killed before the exit
        assert e.reason == ("killed by SIGTERM" if mode == "wait" else "exited 0")
        assert gone(gpid), f"orphan {gpid} left behind"
    finally:
        kill_pids([gpid])


def test_command_not_found(ex: LocalExecutor, tmp_path: Path) -> None:
    ex.launch(job("nocmd", ["definitely-not-a-command-xyz", "--flag"], tmp_path))
    (e,) = wait_exits(ex, 1)
    assert e.reason == "command not found: definitely-not-a-command-xyz"
    assert e.returncode == 127 and not e.ok
    status = state.read_json(ex.root / "nocmd" / "0" / "0" / state.STATUS)
    assert status is not None and status["reason"] == e.reason
    assert "Traceback" not in (ex.root / "nocmd" / "0" / "0" / state.SUPERVISOR_LOG).read_text()


def test_exit_codes_are_recorded(ex: LocalExecutor, tmp_path: Path) -> None:
    cmds = {
        "zero": [PY, "-c", "pass"],
        "three": [PY, "-c", "raise SystemExit(3)"],
        "killed": [PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
    }
    for name, cmd in cmds.items():
        ex.launch(job(name, cmd, tmp_path))
    got = {e.job: (e.returncode, e.signal, e.reason) for e in wait_exits(ex, 3)}
    assert got == {
        "zero": (0, None, "exited 0"),
        "three": (3, None, "exited 3"),
        "killed": (None, signal.SIGKILL, "killed by SIGKILL"),
    }
    assert ex.poll() == []


def test_bad_launches_are_refused(ex: LocalExecutor, tmp_path: Path) -> None:
    with pytest.raises(ExecutorError, match="workdir"):
        ex.launch(job("bad", [PY, "-c", "pass"], tmp_path, workdir=str(tmp_path / "nowhere")))
    with pytest.raises(ExecutorError, match="invalid job name"):
        ex.launch(job("../x", [PY, "-c", "pass"], tmp_path))
    with pytest.raises(ExecutorError, match="no command"):
        ex.launch(job("empty", [], tmp_path))
    with pytest.raises(ExecutorError, match="another executor"):
        LocalExecutor(ex.root)
    ex.launch(job("once", [PY, "-c", IGNORE], tmp_path))
    with pytest.raises(ExecutorError, match="still running"):
        ex.launch(job("once", [PY, "-c", "pass"], tmp_path, attempt=1))
    ex.stop("once", 0, 0)
    (e,) = wait_exits(ex, 1)
    assert e.attempt == 0


def test_stop_right_after_launch(ex: LocalExecutor, tmp_path: Path) -> None:
    ex.launch(job("quick", [PY, "-c", IGNORE], tmp_path, n=2))
    ex.stop("quick", 0, 0.2)  # the supervisors may not even have started
    exits = wait_exits(ex, 2)
    assert {e.rank for e in exits} == {0, 1}
    assert ex.running() == {}


def test_a_supervisor_that_cannot_start_is_reported_at_once(root: Path, tmp_path: Path) -> None:
    with LocalExecutor(root, python="/bin/false") as broken:
        broken.launch(job("nosup", [PY, "-c", "pass"], tmp_path))
        (e,) = wait_exits(broken, 1, timeout=5)  # well before STARTUP_TIMEOUT
        assert e.returncode is None and e.reason.startswith("supervisor failed to start")


def test_a_dead_supervisor_takes_its_replica_along(ex: LocalExecutor, tmp_path: Path) -> None:
    ex.launch(job("orphan", [PY, "-c", IGNORE], tmp_path))
    wait_for(_ready(tmp_path, "orphan").exists)
    rdir = ex.root / "orphan" / "0" / "0"
    sup = state.read_pid(rdir / state.SUPERVISOR_PID)
    child = state.read_pid(rdir / state.CHILD_PID)
    assert sup and child
    os.kill(sup[0], signal.SIGKILL)
    (e,) = wait_exits(ex, 1)
    assert e.returncode is None and "supervisor died" in e.reason
    wait_for(lambda: gone(child[0]), 5)
