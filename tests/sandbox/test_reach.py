"""A replica run as its team's user reaches its program and fairpod's interpreter where they live under a directory
that user cannot enter (``/root`` mode 0700 with pyenv or conda in it, a venv in a home directory), and nothing else
there: on this kernel, through the real supervisor, as root (per-team users), with the whole sandbox."""

from __future__ import annotations

import os
import pwd
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fairpod.executors import LocalExecutor
from fairpod.executors.base import JobLaunch, ReplicaExit, ReplicaLaunch
from fairpod.sandbox import namespaces, reach, users

from ..server.conftest import Server
from .conftest import live_server, remove_users_made_since, team_users, wait_for

SECRET = "SECRET-BESIDE-THE-INTERPRETER"



@pytest.fixture
def as_root(full_sandbox: None) -> Iterator[None]:
    """Root with namespaces; the per-team users the test makes are removed after it."""
    if os.geteuid() != 0:
        pytest.skip("needs root: per-team users")
    if why := namespaces.supported():
        pytest.skip(why)
    before = team_users()
    yield
    remove_users_made_since(before)


@pytest.fixture
def shut() -> Iterator[Path]:
    """A directory only root may enter (mode 0700, outside /tmp, which a replica has its own of), holding a
    program that probes its surroundings, an interpreter, a secret beside them, a link ``current`` to ``py`` and a
    copy ``probe-here`` of the program; and ``<shut>-venv/bin`` (which
    anyone may enter) with ``probe``, a symbolic link to the program (as a venv's ``bin/python`` points into
    ``/root/.pyenv``), and ``byinterp``, the same probe run by the interpreter its ``#!`` line names."""
    base = Path(tempfile.mkdtemp(prefix="fairpod-shut-", dir="/var/tmp"))
    venv = Path(f"{base}-venv")
    try:
        os.chmod(base, 0o700)
        (base / "secret.txt").write_text(SECRET)
        (base / "state").mkdir()
        prog = base / "py" / "bin" / "probe"
        prog.parent.mkdir(parents=True)
        prog.write_text(f"#!/bin/sh\necho \"ran as $(id -un)\"\nls -a {base} 2>&1\n"
                        f"cat {base}/secret.txt {base}/py/home/secret.txt 2>&1\n"
                        f"echo written > {base}/py/new 2>&1\necho probe-done\n")
        prog.chmod(0o755)
        (base / "state" / "tool").write_bytes(prog.read_bytes())
        (base / "state" / "tool").chmod(0o755)
        (base / "py" / "home").mkdir()  # fairpod's state directory, inside what is brought back
        (base / "py" / "home" / "secret.txt").write_text(SECRET)
        (base / "current").symlink_to("py")  # as pyenv's or conda's links to a version
        (base / "probe-here").write_bytes(prog.read_bytes())  # a program right in the shut directory
        (base / "probe-here").chmod(0o755)
        (venv / "bin").mkdir(parents=True)
        venv.chmod(0o755)
        (venv / "bin" / "probe").symlink_to(prog)
        shutil.copy2("/bin/sh", base / "py" / "bin" / "interp")  # a script in the venv whose #! names it
        (venv / "bin" / "byinterp").write_text(prog.read_text().replace("#!/bin/sh", f"#!{base}/py/bin/interp"))
        (venv / "bin" / "byinterp").chmod(0o755)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(venv, ignore_errors=True)


def run_one(ex: LocalExecutor, tmp_path: Path, name: str, command: list[str],
            workdir: str = "/", checkpoint_dir: Path | None = None) -> tuple[ReplicaExit, str]:
    ex.launch(JobLaunch(job=name, team="reach", attempt=0, command=command, workdir=workdir,
                        checkpoint_dir=str(checkpoint_dir or tmp_path / "ckpt" / name), grace_seconds=1.0,
                        replicas=(ReplicaLaunch(rank=0, node="n0"),)))
    got: list[ReplicaExit] = []

    def ended() -> list[ReplicaExit]:
        got.extend(ex.poll())
        return [e for e in got if e.job == name]

    end = wait_for(ended, 60)[0]
    return end, (tmp_path / "runs" / name / "0" / "0" / "output.log").read_text()


@pytest.mark.parametrize("how", ["path", "venv-link", "shebang", "link-in-shut", "file"])
def test_the_team_user_runs_a_program_under_a_shut_directory_and_sees_nothing_else(
        as_root: None, shut: Path, ex: LocalExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        how: str) -> None:
    first = f"{shut}/current/bin" if how == "link-in-shut" else f"{shut}-venv/bin"
    monkeypatch.setenv("PATH", f"{first}:/usr/sbin:/usr/bin:/sbin:/bin")  # the replica's PATH is its supervisor's
    monkeypatch.setenv("FAIRPOD_HOME", str(shut / "py" / "home"))  # hidden even inside what is brought back
    command = {"path": [str(shut / "py" / "bin" / "probe")], "venv-link": ["probe"], "shebang": ["byinterp"],
               "link-in-shut": ["probe"], "file": [str(shut / "probe-here")]}[how]
    way = {"link-in-shut": ["current", "py"], "file": ["probe-here"]}.get(how, ["py"])
    end, log = run_one(ex, tmp_path, f"reach-{how}", command)
    body = log.split(" ====\n", 1)[1]
    assert end.reason == "exited 0", log
    assert body.splitlines()[0] == f"ran as {users.user_name('reach')}", body
    assert "probe-done" in body
    listed = body.splitlines()[1:3 + len(way)]
    assert listed == [".", "..", *way], body  # only the way to it: no secret.txt, no state
    assert SECRET not in body
    assert not (shut / "py" / "new").exists()  # what is brought back is read-only
    assert (shut / "secret.txt").read_text() == SECRET and oct(shut.stat().st_mode & 0o777) == "0o700"  # untouched


def test_a_program_inside_fairpods_state_directory_is_never_brought_back(
        as_root: None, shut: Path, ex: LocalExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRPOD_HOME", str(shut / "state"))  # the supervisors read it: this is what they hide
    tool = str(shut / "state" / "tool")
    uid = pwd.getpwnam("root").pw_uid + 65000
    assert reach.plan([tool], uid, (uid,), (str(shut / "state"),)) == ()
    end, log = run_one(ex, tmp_path, "reach-state", [tool])
    assert end.reason in (f"permission denied: {tool} (as user {users.user_name('reach')}: check the command "
                          "and the workdir /)", f"command not found: {tool}"), end.reason
    assert "probe-done" not in log and SECRET not in log


def test_a_workdir_under_the_covered_directory_stays_out_of_reach(
        as_root: None, shut: Path, ex: LocalExecutor, tmp_path: Path) -> None:
    """Bringing the program back does not bring back a workdir beside it that the user could not enter."""
    end, log = run_one(ex, tmp_path, "reach-workdir", [str(shut / "py" / "bin" / "probe")], str(shut / "state"))
    assert end.reason != "exited 0" and "probe-done" not in log, log


@pytest.mark.parametrize("where", ["home", "checkpoint_dir"])
def test_the_team_user_writes_its_checkpoint_directory_under_a_shut_directory(
        as_root: None, shut: Path, ex: LocalExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        where: str) -> None:
    """``FAIRPOD_HOME`` (or ``cluster.checkpoint_dir``) under a directory only root may enter, as ``/root`` (0700):
    the team's user writes ``$FAIRPOD_CHECKPOINT_DIR``, and of the way to it sees only the emptied state (or
    checkpoint) directory; nothing on the host is opened up. Before, ``echo x > $FAIRPOD_CHECKPOINT_DIR/step``
    failed with permission denied in every per-team job."""
    monkeypatch.setenv("FAIRPOD_HOME", str(shut / "state"))
    top, below = ("state", "checkpoints") if where == "home" else ("ckpts", "reach")  # <root>/<team>/<job>
    (shut / "ckpts").mkdir(mode=0o700)
    modes = [oct(d.stat().st_mode & 0o777) for d in (shut, shut / "state", shut / "ckpts")]
    ckpt = shut / top / below / "reach" / f"job-{where}" if where == "home" else shut / top / "reach" / "job"
    script = (f'echo x > "$FAIRPOD_CHECKPOINT_DIR/step" && echo wrote; ls -a {shut} {shut}/{top}; '
              f'cat {shut}/secret.txt {shut}/state/tool 2>&1; echo done')
    end, log = run_one(ex, tmp_path, f"ckpt-{where}", ["sh", "-c", script], checkpoint_dir=ckpt)
    body = log.split(" ====\n", 1)[1]
    assert end.reason == "exited 0", log
    assert body.splitlines()[0] == "wrote", body
    assert (ckpt / "step").read_text() == "x\n" and ckpt.stat().st_uid == pwd.getpwnam(users.user_name("reach")).pw_uid
    listed = body.split("\n\n")
    assert listed[0].splitlines()[2:] == [".", "..", top], body  # only the way: no secret.txt, no py
    assert listed[1].splitlines()[1:4] == [".", "..", below], body  # the state (checkpoint) directory, emptied
    assert SECRET not in body and "probe-done" not in body
    assert [oct(d.stat().st_mode & 0o777) for d in (shut, shut / "state", shut / "ckpts")] == modes  # unchanged


@pytest.fixture
def root_server(tmp_path: Path, as_root: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    # as after `source .venv/bin/activate` (scripts/demo.sh): the repo's .venv first on PATH
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    yield from live_server(tmp_path, ("sdk",))


def test_the_readme_tour_runs_its_python_as_the_team_user(root_server: Server) -> None:
    """``fairpod up`` as root with the whole sandbox: a job's ``python`` (the venv's, whose interpreter may live
    under ``/root``) imports fairpod's SDK as the per-team user."""
    s = root_server
    s.submit(name="sdk", team="john", command=["python", "-c", "import fairpod.sdk, os; print('ok', os.getuid())"],
             workdir="/")

    def ended() -> dict[str, Any] | None:
        j = s.job("sdk")
        return j if j["state"] in ("Succeeded", "Failed") else None

    job = wait_for(ended, 60)
    out = next(iter((s.home / "runs").glob("sdk*/0/0/output.log"))).read_text()
    assert job["state"] == "Succeeded", f"{job.get('reason')}\n{out}"
    body = out.split(" ====\n", 1)[1]
    assert body.splitlines()[0] == f"ok {pwd.getpwnam(users.user_name('john')).pw_uid}"


def test_a_program_under_the_hosts_tmp_is_brought_back_into_the_replicas_own(
        as_root: None, ex: LocalExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica's /tmp is its own and empty; fairpod's venv or a job's program in a checkout under the host's
    /tmp is brought back into it, read-only, and nothing beside it is."""
    base = Path(tempfile.mkdtemp(prefix="fairpod-intmp-", dir="/tmp"))
    try:
        base.chmod(0o755)
        (base / "secret.txt").write_text(SECRET)
        prog = base / "venv" / "bin" / "probe"
        prog.parent.mkdir(parents=True)
        prog.write_text(f"#!/bin/sh\necho \"ran as $(id -un)\"\nls {base}\ncat {base}/secret.txt 2>&1\n"
                        f"echo written > {base}/venv/new 2>&1\necho probe-done\n")
        prog.chmod(0o755)
        (base / "venv" / "bin" / "python").symlink_to("probe")  # as a venv's bin/python
        (base / "home").mkdir()
        monkeypatch.setenv("FAIRPOD_HOME", str(base / "home"))  # hidden: never brought back
        assert reach.from_tmp([str(base / "venv"), str(prog), str(base / "home" / "x")],
                              (str(base / "home"),)) == (reach.Op("dir", str(base / "venv")),)
        monkeypatch.setenv("PATH", f"{base}/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        end, log = run_one(ex, tmp_path, "reach-tmp", ["python"])
        body = log.split(" ====\n", 1)[1]
        assert end.reason == "exited 0", log
        assert body.splitlines()[:2] == [f"ran as {users.user_name('reach')}", "venv"], body  # nothing beside it
        assert "probe-done" in body and SECRET not in body
        assert not (base / "venv" / "new").exists()  # read-only
    finally:
        shutil.rmtree(base, ignore_errors=True)
