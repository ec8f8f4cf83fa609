"""Users as themselves (``cluster.identity: unix``, docs/identity.md), on the real kernel: two Unix accounts made by
the test, in two teams by Unix group, submit an sbatch script from their own directories through the control
plane's Unix socket (no token); a third way in is MUNGE from a second loopback address, with the test's own
``munged`` and key. One server for the module."""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from fairpod import sandbox
from fairpod.sandbox import namespaces, reach

from ... import httpclient, reaper
from ..conftest import SEED_SPEC, Server, wait_for

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("munged")
    or sandbox.namespaces.supported() is not None,
    reason="needs root, useradd, munge (scripts/test.sh installs it) and mount namespaces")

# written in the form of aws-samples/awsome-distributed-training 3.test_cases/16.pytorch-cpu-ddp/slurm/
# 1.conda-train.sbatch (the seed's script): the job name, --exclusive, --wait-all-nodes, two nodes; the step
# says who it runs as, makes a file in the submitter's directory and tries to read the other user's secret
SCRIPT = """#!/bin/bash
#SBATCH --job-name=cpu-ddp-conda
#SBATCH --exclusive
#SBATCH --wait-all-nodes=1
#SBATCH --nodes 2

mkdir -p logs
srun bash -c 'echo "step $SLURM_PROCID as $(id -un) groups $(id -Gn)"; echo made > logs/step-$SLURM_PROCID.txt'
cat {other}/secret.txt 2>&1 || echo "OTHER SECRET NOT READ"
cat {mine}/secret.txt
"""


@dataclass
class Account:
    name: str
    group: str
    pw: pwd.struct_passwd
    dir: Path


@dataclass
class Env:
    server: Server
    base: Path
    sock: Path
    munge_sock: Path
    alice: Account
    bob: Account

    def cli(self, who: Account, *args: str, url: str | None = None, munge: bool = False, check: bool = True,
            extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """``fairpod ARGS`` run as ``who`` (its uid, groups, umask 077) from its own directory. The interpreter
        lies under root's 0700 home: as a replica does, the command sees it through a private mount namespace
        (fairpod.sandbox.reach), nothing on the host changed."""
        gids = tuple(os.getgrouplist(who.name, who.pw.pw_gid))
        ops = reach.plan(reach.wanted(sys.executable, os.environ.get("PATH"), str(who.dir)), who.pw.pw_uid, gids, ())
        uid, gid = who.pw.pw_uid, who.pw.pw_gid

        def become() -> None:
            namespaces.unshare(namespaces.CLONE_NEWNS)
            namespaces.mount(None, "/", None, namespaces.MS_REC | namespaces.MS_PRIVATE)
            namespaces._reach(ops)
            os.setgroups(list(gids))
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            os.umask(0o077)

        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(who.dir), "LANG": "C.UTF-8",
               "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "FAIRPOD_SOCKET": str(self.sock)}
        if url:
            env.pop("FAIRPOD_SOCKET")
            env["FAIRPOD_URL"] = url
        if munge:
            env.update(FAIRPOD_AUTH="munge", FAIRPOD_MUNGE_SOCKET=str(self.munge_sock))
        env.update(extra or {})
        r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", *args], cwd=who.dir, env=env,
                           preexec_fn=become, capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError(f"fairpod {' '.join(args)} as {who.name} failed ({r.returncode}): "
                                 f"{r.stderr}{r.stdout}")
        return r


def _account(tag: str, base: Path) -> Account:
    name, group = f"fp{tag}{uuid.uuid4().hex[:6]}", f"fpg{tag}{uuid.uuid4().hex[:6]}"
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    home = base / name
    subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/bin/bash",
                    "--user-group", "--groups", group, name], check=True, capture_output=True)
    pw = pwd.getpwnam(name)
    home.mkdir(mode=0o700)
    os.chown(home, pw.pw_uid, pw.pw_gid)
    os.chmod(home, 0o700)
    secret = home / "secret.txt"
    secret.write_text(f"secret of {name}\n")
    os.chown(secret, pw.pw_uid, pw.pw_gid)
    os.chmod(secret, 0o600)
    return Account(name, group, pw, home)


def _remove(acc: Account) -> None:
    subprocess.run(["userdel", acc.name], capture_output=True, check=False)
    subprocess.run(["groupdel", acc.group], capture_output=True, check=False)


def start_munged(mdir: Path, key: Path | None = None) -> tuple[subprocess.Popen, Path]:
    """A ``munged`` of the test's own, with its own key (``key``: another daemon's, as a second host has the
    cluster's one key), on its own socket under ``mdir``; (the process, its socket)."""
    mdir.mkdir(mode=0o755)
    os.chmod(mdir, 0o755)
    if key is None:
        key = mdir / "munge.key"
        subprocess.run(["mungekey", "--create", "--keyfile", str(key), "--bits", "1024"], check=True,
                       capture_output=True)
    msock = mdir / "munge.socket"
    munged = subprocess.Popen(["munged", "--foreground", "--force", f"--socket={msock}", f"--key-file={key}",
                               f"--pid-file={mdir / 'munged.pid'}", f"--log-file={mdir / 'munged.log'}",
                               f"--seed-file={mdir / 'munged.seed'}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    reaper.started(munged.pid)
    wait_for(msock.exists, 20, "munged's socket")
    return munged, msock


def stop_munged(munged: subprocess.Popen | None) -> None:
    if munged is not None:
        munged.terminate()
        munged.wait(timeout=30)


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    # not under pytest's tmp (0700 root): the accounts must reach their own directories and the checkpoints
    base = Path(tempfile.mkdtemp(prefix="fairpod-identity-", dir="/var/tmp"))
    os.chmod(base, 0o755)
    accounts: list[Account] = []
    munged = None
    server = None
    try:
        alice, bob = _account("a", base), _account("b", base)
        accounts += [alice, bob]
        munged, msock = start_munged(base / "munge")
        doc = yaml.safe_load(SEED_SPEC.read_text())
        doc["cluster"]["identity"] = "unix"
        groups = {"john": alice.group, "smith": bob.group}
        for t in doc["teams"]:
            t["unix_group"] = groups[t["name"]]
        spec = base / "spec.yaml"
        spec.write_text(yaml.safe_dump(doc))
        server = Server(base, spec)
        sock = base / "api.sock"
        server.env.update(FAIRPOD_SOCKET=str(sock), FAIRPOD_MUNGE_SOCKET=str(msock))
        server.extra = ["--advertise-address", "127.0.0.2"]
        server.start()
        yield Env(server, base, sock, msock, alice, bob)
    finally:
        if server is not None:
            server.kill(15)
        stop_munged(munged)
        for a in accounts:
            _remove(a)
        shutil.rmtree(base, ignore_errors=True)


def _submit(e: Env, who: Account, other: Account) -> str:
    script = who.dir / "train.sbatch"
    script.write_text(SCRIPT.format(other=other.dir, mine=who.dir))
    os.chown(script, who.pw.pw_uid, who.pw.pw_gid)
    out = e.cli(who, "sbatch", "train.sbatch").stdout
    m = re.search(r"Submitted batch job (\d+)", out)
    assert m, out
    return m.group(1)


def test_two_users_run_the_sbatch_script_as_themselves(env: Env):
    """Each account's job runs as that account with its groups, writes slurm-<id>.out and logs/ in its directory
    as its own files (0600 by its umask 077), and cannot read the other account's files."""
    e = env
    ids = {a.name: _submit(e, a, o) for a, o in ((e.alice, e.bob), (e.bob, e.alice))}
    for who in (e.alice, e.bob):
        jid = ids[who.name]
        job = wait_for(lambda jid=jid: (j := e.server.api("GET", f"/jobs/{jid}").json())["state"] in
                       ("Succeeded", "Failed") and j, 120, f"job {jid} of {who.name} to end")
        assert job["state"] == "Succeeded", job
        assert job["user"] == who.name, job
        out = who.dir / f"slurm-{jid}.out"
        st = out.stat()
        assert (st.st_uid, st.st_gid) == (who.pw.pw_uid, who.pw.pw_gid), out
        assert stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
        text = out.read_text()
        assert f"step 0 as {who.name} groups" in text and f"step 1 as {who.name} groups" in text, text
        assert who.group in text.split("groups", 1)[1].splitlines()[0], text  # its supplementary group
        other = e.bob if who is e.alice else e.alice
        assert "OTHER SECRET NOT READ" in text and f"secret of {other.name}" not in text, text
        assert f"secret of {who.name}" in text, text
        logs = who.dir / "logs"
        assert logs.stat().st_uid == who.pw.pw_uid and stat.S_IMODE(logs.stat().st_mode) == 0o700
        for f in logs.iterdir():
            assert f.stat().st_uid == who.pw.pw_uid and stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_the_cli_is_known_by_its_uid_and_cannot_claim_another(env: Env):
    """No token anywhere: the socket's peer uid is the user, with the team of its Unix group; what a caller sends
    (a token of nobody, a user name in the job, a header) changes nothing; TCP without a token is refused."""
    e = env
    for acc, team in ((e.alice, "john"), (e.bob, "smith")):
        st = json.loads(e.cli(acc, "status", "-o", "json").stdout)
        assert st["user"]["name"] == acc.name and st["user"]["teams"] == [team], st
        out = e.cli(acc, "start-job", "--name", f"mine-{acc.name}", "--team", team, "--", "true").stdout
        assert f"mine-{acc.name}" in out
    r = e.cli(e.bob, "start-job", "--name", "not-mine", "--team", "john", "--", "true", check=False)
    assert r.returncode != 0 and f"user {e.bob.name} cannot act for team john" in r.stderr, r.stderr
    # a job that names another user as its submitter is still the caller's
    r = subprocess.run(["curl", "-s", "--unix-socket", str(e.sock), "-X", "POST", "-H", "Content-Type: application/json",
                        "-H", "fairpod.peer: 0,0,0", "--data", json.dumps(
                            {"name": "forged", "team": "smith", "user": e.alice.name, "command": ["true"]}),
                        "http://localhost/api/v1/jobs"], capture_output=True, text=True, preexec_fn=_drop(e.bob),
                       timeout=30)
    assert e.server.job("forged")["user"] == e.bob.name, r.stdout
    # TCP, no token: nothing says who this is
    r = httpclient.get(e.server.url + "/api/v1/me", timeout=10)
    assert r.status_code == 401, r.text
    # a header that names a peer is only a header
    r = httpclient.get(e.server.url + "/api/v1/me", headers={"fairpod.peer": "1,0,0"}, timeout=10)
    assert r.status_code == 401, r.text
    # bob cannot make a MUNGE credential for alice's uid (munge itself refuses: only root may)
    r = subprocess.run(["munge", "--socket", str(e.munge_sock), "--uid", e.alice.name, "--no-input"],
                       capture_output=True, text=True, preexec_fn=_drop(e.bob), timeout=30)
    assert r.returncode != 0, r.stdout


def _drop(acc: Account):
    def pre() -> None:
        os.setgroups([])
        os.setresgid(acc.pw.pw_gid, acc.pw.pw_gid, acc.pw.pw_gid)
        os.setresuid(acc.pw.pw_uid, acc.pw.pw_uid, acc.pw.pw_uid)
    return pre


def test_munge_from_a_second_address(env: Env):
    """From 127.0.0.2 (another "host"): the user's MUNGE credential is its identity; a credential replayed, or
    made for another request, is refused."""
    e = env
    url = f"http://127.0.0.2:{e.server.port}"
    r = e.cli(e.bob, "start-job", "--name", "by-munge", "--team", "smith", "--", "true", url=url, munge=True)
    assert "by-munge" in r.stdout
    assert e.server.job("by-munge")["user"] == e.bob.name
    r = e.cli(e.bob, "start-job", "--name", "by-munge-2", "--team", "john", "--", "true", url=url, munge=True,
              check=False)
    assert r.returncode != 0 and "cannot act for team john" in r.stderr, r.stderr
    # without a credential from 127.0.0.2: refused
    r = e.cli(e.bob, "list-jobs", url=url, check=False)
    assert r.returncode != 0 and "FAIRPOD_AUTH=munge from another host" in r.stderr, r.stderr
    # one credential, for GET /api/v1/me, used twice; and for another request
    cred = subprocess.run(["munge", "--socket", str(e.munge_sock), "--string", "GET /api/v1/me"],
                          capture_output=True, text=True, preexec_fn=_drop(e.bob), timeout=30,
                          check=True).stdout.strip()
    first = httpclient.get(url + "/api/v1/me", headers={"Authorization": f"Munge {cred}"}, timeout=10)
    assert first.status_code == 200 and first.json()["name"] == e.bob.name, first.text
    again = httpclient.get(url + "/api/v1/me", headers={"Authorization": f"Munge {cred}"}, timeout=10)
    assert again.status_code == 401 and "Replayed" in again.text, again.text
    cred = subprocess.run(["munge", "--socket", str(e.munge_sock), "--string", "GET /api/v1/me"],
                          capture_output=True, text=True, preexec_fn=_drop(e.bob), timeout=30,
                          check=True).stdout.strip()
    other = httpclient.get(url + "/api/v1/jobs", headers={"Authorization": f"Munge {cred}"}, timeout=10)
    assert other.status_code == 401 and "another request" in other.text, other.text
    assert grp.getgrnam(e.bob.group)  # the account's group is still there for the module's other tests
