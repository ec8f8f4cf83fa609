"""The member→admin attack finds nothing: a replica cannot read the CLI config (the admin token), fairpod's state
directory (database, signing key, every job's logs), another team's checkpoints, or another job's environment
through /proc. On a real ``fairpod up`` as root (replicas as the per-team users), and as an unprivileged user
(the supervisor in a process that runs as a user this test creates; a user namespace makes the rest)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.executors import state
from fairpod.executors.supervisor import Supervisor
from fairpod.sandbox import namespaces

from ..server.conftest import Server
from .conftest import live_server, remove_users_made_since, team_users, wait_for

SECRETS = ("ckpt-secret-smith", "log-secret-smith", "env-secret-smith", "TOKEN-OF-THE-ADMIN", "KEY-OF-THE-SERVER")
VICTIM = ("echo ckpt-secret-smith > \"$FAIRPOD_CHECKPOINT_DIR/s\"; echo log-secret-smith; echo ready; "
          "exec sleep 120")


def probe(home: Path, config: Path) -> str:
    """A shell script that looks everywhere a member would, and prints what it finds."""
    return f"""
id -un; echo "pid $$"
ls -la {home} {home}/runs {home}/checkpoints {config.parent} 2>&1
cat {config} {home}/job-token.key {home}/fairpod.db 2>&1 | head -c 300
for f in {home}/runs/*/*/*/output.log {home}/checkpoints/*/*/s; do cat "$f"; done 2>&1
for e in /proc/[0-9]*/environ; do tr '\\0' '\\n' < "$e"; done 2>/dev/null | grep -i secret
echo mine > "$FAIRPOD_CHECKPOINT_DIR/own" && cat "$FAIRPOD_CHECKPOINT_DIR/own"
mknod /tmp/fp-mem c 1 1 2>/dev/null && echo ESCAPED-mknod
for g in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs /sys/fs/cgroup/memory/cgroup.procs; do
  (echo $$ > "$g") 2>/dev/null && echo "ESCAPED-cgroup $g"
done
unshare -U -r cat /proc/self/uid_map 2>/dev/null | grep -q "^ *0 *0 " && echo ESCAPED-userns-root
echo probe-done
"""



@pytest.fixture
def root_server(tmp_path: Path, full_sandbox: None) -> Iterator[Server]:
    if os.geteuid() != 0:
        pytest.skip("needs root: per-team users")
    if why := namespaces.supported():
        pytest.skip(why)
    before = team_users()
    try:
        yield from live_server(tmp_path, ("victim", "probe"))
    finally:
        remove_users_made_since(before)


def test_attack_finds_nothing_on_a_default_fairpod_up_as_root(root_server: Server) -> None:
    s = root_server
    s.submit(name="victim", team="smith", command=["/bin/sh", "-c", VICTIM], workdir="/",
             env={"SECRET": "env-secret-smith"})
    s.wait_state("victim", "Running")
    victim_log = wait_for(lambda: next(iter((s.home / "runs").glob("victim*/0/0/output.log")), None), 30)
    wait_for(lambda: "ready" in victim_log.read_text(), 30)
    Path(s.env["FAIRPOD_CONFIG"]).read_text()  # the CLI config exists, with the admin token in it
    cfg = Path(s.env["FAIRPOD_CONFIG"])
    s.submit(name="probe", team="john", command=["/bin/sh", "-c", probe(s.home, cfg)], workdir="/")
    job = s.wait_state("probe", "Succeeded", timeout=60)
    out = next(iter((s.home / "runs").glob("probe*/0/0/output.log"))).read_text()
    assert "probe-done" in out, out
    body = out.split(" ====\n", 1)[1]  # after fairpod's header, which quotes the script
    assert body.splitlines()[0] == "fairpod-john"  # the team's own unprivileged user
    assert "mine" in body  # its own checkpoint directory is there and its own
    token = s.token
    for secret in (*SECRETS[:3], token):
        assert secret not in body, f"the probe read {secret!r}:\n{body}"
    assert "ESCAPED" not in body, body
    assert job["state"] == "Succeeded"
    assert s.job("victim")["state"] == "Running"
    # the same probe from a container of team john's, in an image with a setuid-root program: nothing either
    from . import images

    s.submit(name="probe-img", team="john", image=images.setuid(), image_pull_policy="Never",
             command=["/bin/sh", "-c", probe(s.home, cfg) + "/bin/escalate\n"])
    job = s.wait_state("probe-img", "Succeeded", timeout=120)
    out = next(iter((s.home / "runs").glob("probe-img*/0/0/output.log"))).read_text()
    body = out.split(" ====\n", 2)[2]  # after the header and the image line
    assert "probe-done" in body and "\nmine\n" in body, body
    for secret in (*SECRETS[:3], token):
        assert secret not in body, f"the probe read {secret!r} from a container:\n{body}"
    assert "ESCAPED" not in body, body
    assert "CapEff:\t0000000000000000" in body and "NoNewPrivs:\t1" in body, body  # the setuid program: nothing
    own = next(iter((s.home / "checkpoints" / "john").glob("probe-img*/own"))).stat()
    assert pwd.getpwuid(own.st_uid).pw_name == "fairpod-john"  # the container's root is the team's user
    assert s.job("victim")["state"] == "Running"


@pytest.fixture
def unprivileged(full_sandbox: None) -> Iterator[pwd.struct_passwd]:
    """A user made for this test (removed after it), and a directory of its own outside /tmp's view."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd to make an unprivileged user")
    name = f"fpt{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", name],
                   check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


def _as_user(pw: pwd.struct_passwd, rdir: Path) -> int:
    """Fork, become ``pw``, run the supervisor of ``rdir`` (no exec of an interpreter: this suite's lives under
    /root, which the user cannot reach); the child's PID."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid)
            os.setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid)
            sup = Supervisor(rdir)
            sup.finish(sup.run())
            code = 0
        finally:
            os._exit(code)
    return pid


def test_attack_finds_nothing_as_an_unprivileged_user(unprivileged: pwd.struct_passwd, tmp_path: Path) -> None:
    pw = unprivileged
    base = Path(tempfile.mkdtemp(prefix="fairpod-unpriv-", dir="/var/tmp"))
    pids: list[int] = []
    try:
        os.chown(base, pw.pw_uid, pw.pw_gid)
        home, cfg = base / "home", base / "config" / "fairpod" / "config.json"
        runs = home / "runs"
        for d in (runs / "victim" / "0" / "0", runs / "probe" / "0" / "0", cfg.parent,
                  home / "checkpoints" / "smith" / "victim", home / "checkpoints" / "john" / "probe"):
            d.mkdir(parents=True, exist_ok=True)
        cfg.write_text('{"token": "TOKEN-OF-THE-ADMIN"}')
        (home / "job-token.key").write_text("KEY-OF-THE-SERVER")
        for p in (base, *base.rglob("*")):
            os.chown(p, pw.pw_uid, pw.pw_gid)
        old = {k: os.environ.get(k) for k in ("FAIRPOD_HOME", "FAIRPOD_CONFIG")}
        os.environ.update(FAIRPOD_HOME=str(home), FAIRPOD_CONFIG=str(cfg))
        try:
            for name, team, cmd, env in (("victim", "smith", VICTIM, {"SECRET": "env-secret-smith"}),
                                         ("probe", "john", probe(home, cfg), {})):
                rdir = runs / name / "0" / "0"
                state.write_launch(rdir, {
                    "job": name, "team": team, "attempt": 0, "rank": 0, "world_size": 1, "node": "n0",
                    "command": ["/bin/sh", "-c", cmd], "workdir": "/", "grace_seconds": 1.0,
                    "env": {**env, "FAIRPOD_CHECKPOINT_DIR": str(home / "checkpoints" / team / name)},
                    "limits": {"mcpu": 500, "mib": 256, "gpus": []}, "launched_at": time.time()})
                for p in rdir.iterdir():
                    os.chown(p, pw.pw_uid, pw.pw_gid)
                pids.append(_as_user(pw, rdir))
                if name == "victim":
                    wait_for(lambda: "ready" in (runs / "victim/0/0/output.log").read_text(), 30)
        finally:
            for k, v in old.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        st = wait_for(lambda: state.read_json(runs / "probe/0/0" / state.STATUS), 60)
        out = (runs / "probe/0/0/output.log").read_text()
        assert st["reason"] == "exited 0", out
        body = out.split(" ====\n", 1)[1]
        said = [ln for ln in body.splitlines() if not ln.startswith("==== fairpod:")]
        assert said[0] == pw.pw_name and "probe-done" in said and "mine" in said, body
        assert "limits not enforced" in body  # no delegated cgroup for this user: said, not pretended
        assert "ESCAPED" not in body, body
        for secret in SECRETS:
            assert secret not in body, f"the probe read {secret!r}:\n{body}"
    finally:
        for rdir in (base / "home" / "runs").glob("*/0/0"):
            state.write_json(rdir / state.STOP, {"grace_seconds": 0})
        for pid in pids:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
                time.sleep(0.05)
        shutil.rmtree(base, ignore_errors=True)
    assert sys.executable  # (the interpreter is never exec'd as the user)


@pytest.fixture
def made_users() -> Iterator[None]:
    before = team_users()
    yield
    remove_users_made_since(before)


def test_a_stop_reaches_the_command_in_its_namespace_once(full_sandbox: None, made_users: None, tmp_path: Path) -> None:
    """The command is PID 2 of its PID namespace: SIGTERM reaches it (once) as on the host, and its end, by exit
    code or by signal, is the replica's."""
    from fairpod.executors import LocalExecutor
    from fairpod.executors.base import JobLaunch, ReplicaLaunch

    if why := namespaces.supported():
        pytest.skip(why)
    ex = LocalExecutor(tmp_path / "runs")
    try:
        for name, cmd in (("trap", 'trap "echo got TERM; exit 3" TERM; echo ready; sleep 30 & wait'),
                          ("plain", "echo ready; exec sleep 30")):
            ex.launch(JobLaunch(job=name, team="a", attempt=0, command=["/bin/sh", "-c", cmd], workdir="/",
                                checkpoint_dir=str(tmp_path / "ckpt" / name), grace_seconds=10.0,
                                replicas=(ReplicaLaunch(rank=0, node="n0"),)))
        logs = {n: tmp_path / "runs" / n / "0" / "0" / "output.log" for n in ("trap", "plain")}
        for log in logs.values():
            wait_for(lambda log=log: "ready" in log.read_text().splitlines(), 30)
        ex.stop("trap", 0, 10.0)
        ex.stop("plain", 0, 10.0)
        got: list = []
        wait_for(lambda: len(got) == 2 or got.extend(ex.poll()), 30)
        reasons = {e.job: e.reason for e in got}
        assert reasons == {"trap": "exited 3", "plain": "killed by SIGTERM"}
        assert logs["trap"].read_text().splitlines().count("got TERM") == 1
        assert "grace period over" not in logs["plain"].read_text()  # ended by the SIGTERM, not by a SIGKILL
    finally:
        ex.close()


def test_a_checkout_under_tmp_keeps_its_workdir(full_sandbox: None, made_users: None, tmp_path: Path) -> None:
    """A checkout under the host's /tmp (``/tmp/newcomer/main``), its program run from it: the program is brought
    back into the replica's private /tmp read-only, which made its workdir a skeleton of the way down to it
    (``python: can't open file '/tmp/newcomer/main/examples/resumable.py'``). The workdir is bound back whole,
    writable as on the host."""
    from fairpod.executors import LocalExecutor
    from fairpod.executors.base import JobLaunch, ReplicaLaunch

    if why := namespaces.supported():
        pytest.skip(why)
    top = Path(tempfile.mkdtemp(prefix="newcomer-", dir="/tmp"))
    ex = LocalExecutor(tmp_path / "runs")
    try:
        os.chmod(top, 0o755)
        main = top / "main"
        (main / "bin").mkdir(parents=True)
        (main / "examples").mkdir()
        (main / "out").mkdir()
        os.chmod(main / "out", 0o777)
        (main / "examples" / "data.txt").write_text("the example's data\n")
        run = main / "bin" / "run.sh"
        run.write_text("#!/bin/sh\ncat examples/data.txt\necho written > out/made.txt && echo wrote\n")
        run.chmod(0o755)
        ex.launch(JobLaunch(job="tour", team="a", attempt=0, command=["./bin/run.sh"], workdir=str(main),
                            checkpoint_dir=str(tmp_path / "ckpt" / "tour"), grace_seconds=10.0,
                            replicas=(ReplicaLaunch(rank=0, node="n0"),)))
        got: list = []
        wait_for(lambda: got or got.extend(ex.poll()), 30)
        log = (tmp_path / "runs" / "tour" / "0" / "0" / "output.log").read_text()
        assert got[0].reason == "exited 0", log
        assert "the example's data" in log and "wrote" in log, log
        assert (main / "out" / "made.txt").read_text() == "written\n"
    finally:
        ex.close()
        shutil.rmtree(top, ignore_errors=True)


def test_the_readme_tour_from_a_checkout_under_tmp(full_sandbox: None, made_users: None, tmp_path: Path) -> None:
    """The README's tour from a checkout under /tmp (``/tmp/newcomer-*/main``: its src and examples, fairpod run from
    there): ``start-job ... -- python examples/resumable.py`` from the checkout runs, as the team's user, and reports
    its steps; before, the replica found no ``examples/resumable.py`` in its workdir."""
    if os.geteuid() != 0:
        pytest.skip("needs root: per-team users")
    if why := namespaces.supported():
        pytest.skip(why)
    repo = Path(__file__).resolve().parents[2]
    top = Path(tempfile.mkdtemp(prefix="newcomer-", dir="/tmp"))
    os.chmod(top, 0o755)
    main = top / "main"
    shutil.copytree(repo / "src", main / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(repo / "examples", main / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    servers = live_server(tmp_path / "srv", ("smith-train",),
                          before_start=lambda s: s.env.update(PYTHONPATH=str(main / "src")))
    try:
        s = next(servers)

        def cli(*args: str) -> str:
            r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", *args], cwd=main, env=s.env,
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr + r.stdout
            return r.stdout

        cli("start-job", "--name", "smith-train", "--team", "smith", "--node-count", "2", "--auto-resume", "true",
            "--max-retry", "3", "--", "python3", "examples/resumable.py")
        def started() -> str | None:
            o = cli("get-logs", "smith-train", "--all-replicas")
            assert "can't open file" not in o, o
            return o if o.count("starting at step 0") == 2 else None

        wait_for(started, 60)
        assert s.job("smith-train")["state"] == "Running"
    finally:
        servers.close()
        shutil.rmtree(top, ignore_errors=True)
