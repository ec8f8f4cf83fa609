"""A member's job cannot become admin: it sees no server secret, no admin token, no other team's files.

The attack: a member submits, through the CLI, a job that prints its environment and tries to read the CLI's
config (which holds the admin token), the database, the job-token key and another team's output log.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ..conftest import Server, wait_for

SEED = Path(__file__).resolve().parents[3] / "examples" / "seed" / "spec.yaml"
SMITH_MARKER = "smith-private-result-4242"
USERS = {"john": "fpt-john", "smith": "fpt-smith"}


def _member(server: Server, name: str, team: str) -> str:
    r = server.api("POST", "/users", json={"name": name, "role": "member", "teams": [team]})
    assert r.status_code == 201, r.text
    return r.json()["token"]


def _attack(server: Server) -> str:
    home, config = server.home, server.env["FAIRPOD_CONFIG"]
    return (
        "echo RUNNING-AS=$(id -un); env; "
        f'cat "$FAIRPOD_CONFIG" {config} ~/.config/fairpod/config.json /root/.config/fairpod/config.json; '
        f"cat {home}/fairpod.db {home}/job-token.key {home}/server.log; ls -R {home}; "
        f"cat {home}/runs/*/*/*/output.log {home}/runs/*/*/*/launch.json; "
        'echo ckpt > "$FAIRPOD_CHECKPOINT_DIR/mine" && echo CHECKPOINT-WRITTEN; true'
    )


def _run_attack(server: Server) -> str:
    smith = _member(server, "sam", "smith")
    server.cli("start-job", "--name", "smith-result", "--team", "smith", "--", "sh", "-c",
               f"echo {SMITH_MARKER}; echo {SMITH_MARKER} > $FAIRPOD_CHECKPOINT_DIR/result", token=smith)
    server.wait_state("smith-result", "Succeeded")
    bob = _member(server, "bob", "john")
    server.cli("start-job", "--name", "attack", "--team", "john", "--", "sh", "-c", _attack(server), token=bob)
    server.wait_state("attack", "Succeeded", 30)
    return server.cli("get-logs", "attack", token=bob).stdout


def _assert_nothing_leaked(server: Server, out: str) -> None:
    assert "CHECKPOINT-WRITTEN" in out, out  # the job did run, and its own checkpoint dir is its own
    assert server.token not in out, "the admin token leaked into a member's job"
    assert SMITH_MARKER not in out, "another team's output leaked into a member's job"
    for name in ("FAIRPOD_CONFIG", "FAIRPOD_HOME", "FAIRPOD_DB_URL", "FAIRPOD_SERVER_ONLY_SECRET"):
        assert f"{name}=" not in out, f"{name} reached the replica"
    assert "SQLite format" not in out
    key = (server.home / "job-token.key").read_text().strip()
    assert key not in out


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path, SEED)
    s.env["FAIRPOD_SERVER_ONLY_SECRET"] = "do-not-leak"
    s.start()
    yield s
    s.kill()
    s.kill_replicas()


def test_a_replica_gets_an_allow_listed_environment(guarded: Server):
    bob = _member(guarded, "bob", "john")
    guarded.cli("start-job", "--name", "envdump", "--team", "john", "--", "sh", "-c", "env", token=bob)
    guarded.wait_state("envdump", "Succeeded")
    out = guarded.cli("get-logs", "envdump", token=bob).stdout
    names = {line.split("=", 1)[0] for line in out.splitlines() if "=" in line and not line.startswith("=")}
    assert "FAIRPOD_SERVER_ONLY_SECRET" not in names and "FAIRPOD_CONFIG" not in names
    assert "FAIRPOD_HOME" not in names and "PATH" in names and "FAIRPOD_TOKEN" in names
    assert "FAIRPOD_JOB=envdump-1" in out or "FAIRPOD_JOB_NAME=envdump" in out


def test_state_files_are_private_and_the_job_token_is_not_in_the_database(guarded: Server):
    bob = _member(guarded, "bob", "john")
    guarded.cli("start-job", "--name", "tok", "--team", "john", "--", "sleep", "30", token=bob)
    launch = wait_for(lambda: next(iter((guarded.home / "runs").glob("tok-*/0/0/launch.json")), None), 20,
                      "launch.json")
    wait_for(lambda: not (launch.parent / "secret.json").exists(), 20, "the supervisor to take the token")
    assert "fpj." not in launch.read_text(), "launch.json must hold no job token"
    assert stat.S_IMODE(guarded.home.stat().st_mode) & 0o077 == 0
    for p in [guarded.home / "fairpod.db", guarded.home / "job-token.key", launch, launch.parent / "output.log"]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    for d in [guarded.home / "runs", launch.parent, launch.parent.parent]:
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    import sqlite3

    with sqlite3.connect(guarded.home / "fairpod.db") as db:
        assert db.execute("select count(*) from meta where key = 'job_token_secret'").fetchone()[0] == 0
    guarded.api("POST", "/jobs/tok/cancel")


def _ensure_user(name: str) -> None:
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                       check=True, capture_output=True)


@pytest.fixture
def isolated(tmp_path: Path) -> Iterator[Server]:
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("run_as needs fairpod to run as root (and useradd to make the test users)")
    for user in USERS.values():
        _ensure_user(user)
    spec = yaml.safe_load(SEED.read_text())
    for team in spec["teams"]:
        team["run_as"] = USERS[team["name"]]
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    # the home must be reachable by the run_as users: under /tmp (1777), not under pytest's 0700 tmp dir
    home = Path(tempfile.mkdtemp(prefix="fairpod-iso-", dir="/tmp"))
    s = Server(tmp_path, tmp_path / "spec.yaml")
    s.home = home
    s.env["FAIRPOD_HOME"] = str(home)
    s.env["FAIRPOD_SERVER_ONLY_SECRET"] = "do-not-leak"
    s.start()
    yield s
    s.kill()
    s.kill_replicas()
    shutil.rmtree(home, ignore_errors=True)


def test_a_member_cannot_become_admin_or_read_another_team(isolated: Server):
    out = _run_attack(isolated)
    assert f"RUNNING-AS={USERS['john']}" in out, out
    _assert_nothing_leaked(isolated, out)
    ckpt = next((isolated.home / "checkpoints" / "john").glob("attack-*"))
    assert ckpt.stat().st_uid == pwd.getpwnam(USERS["john"]).pw_uid
    assert stat.S_IMODE(ckpt.stat().st_mode) == 0o700


def test_an_unknown_run_as_user_fails_the_job_with_a_reason(isolated: Server):
    spec = isolated.api("GET", "/spec").json()
    spec["cluster"]["run_as"] = "fpt-nobody-here"
    for team in spec["teams"]:
        team["run_as"] = None
    r = isolated.api("PUT", "/spec", json=spec)
    assert r.status_code == 200, r.text
    isolated.submit(name="nouser", team="john", command=["true"])
    job = isolated.wait_state("nouser", "Failed", 30)
    assert "run_as user 'fpt-nobody-here' does not exist" in (job.get("reason") or str(job)), job
