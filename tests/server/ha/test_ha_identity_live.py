"""Users as themselves under standby control planes (``cluster.identity: unix`` with ``fairpod up --ha``,
docs/identity.md): two real ``fairpod up --ha`` on one real PostgreSQL (tests/server/ha_cluster.py), each with the
Unix socket of its "host" (two sockets of this machine stand for the two hosts' /run/fairpod/api-<port>.sock), a
Unix account made by the test, and the test's own ``munged``. The leader knows the account by its socket's peer
uid; a standby accepts nothing on its socket and names the leader, which the CLI follows with a MUNGE
credential; after the leader is killed the standby that takes over serves the socket, and the account's job
runs as the account."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

from tests.store.conftest import pg_url  # noqa: F401  (the fixture: a real PostgreSQL server)

from ..access.test_identity_live import Env, _account, _remove, pytestmark, start_munged, stop_munged  # noqa: F401
from ..ha_cluster import SEED_SPEC, HaCluster, empty_database, wait_for


def test_the_socket_knows_its_user_through_a_failover(pg_url: str):  # noqa: F811
    empty_database(pg_url)
    # not under pytest's tmp (0700 root): the account must reach its directory and its job's checkpoints
    base = Path(tempfile.mkdtemp(prefix="fairpod-ha-identity-", dir="/var/tmp"))
    os.chmod(base, 0o755)
    alice, munged, ha = None, None, None
    try:
        alice = _account("h", base)
        munged, msock = start_munged(base / "munge")
        doc = yaml.safe_load(SEED_SPEC.read_text())
        doc["cluster"]["identity"] = "unix"
        doc["teams"][0]["unix_group"] = alice.group  # john
        spec = base / "spec.yaml"
        spec.write_text(yaml.safe_dump(doc))
        (base / "ha").mkdir(mode=0o755)
        ha = HaCluster(base / "ha", pg_url, n=2, lease=3.0, env={"FAIRPOD_MUNGE_SOCKET": str(msock)})
        socks = {}
        for node in ha.nodes:
            socks[node.i] = node.env["FAIRPOD_SOCKET"] = str(base / f"host{node.i}-api.sock")
        ha.boot(spec)
        lead = ha.leader()
        standby = next(n for n in ha.nodes if n is not lead)
        wait_for(standby.standing_by, 30, "the standby")
        on_lead = Env(None, base, Path(socks[lead.i]), msock, alice, alice)  # type: ignore[arg-type]
        on_standby = Env(None, base, Path(socks[standby.i]), msock, alice, alice)  # type: ignore[arg-type]
        # the leader's socket: the account, by its uid, in team john by its group
        st = json.loads(on_lead.cli(alice, "status", "-o", "json").stdout)
        assert st["user"]["name"] == alice.name and st["user"]["teams"] == ["john"], st
        # the standby's socket takes no submit: 503 naming the leader, nothing done there
        r = subprocess.run(["curl", "-s", "-i", "--unix-socket", socks[standby.i], "-X", "POST", "-H",
                            "Content-Type: application/json", "--data", json.dumps(
                                {"name": "at-standby", "team": "john", "command": ["true"]}),
                            "http://localhost/api/v1/jobs"], capture_output=True, text=True, timeout=30)
        assert r.stdout.startswith("HTTP/1.1 503") and f"x-fairpod-leader: {lead.url}" in r.stdout, r.stdout
        assert ha.request("GET", "/jobs/at-standby").status_code == 404
        # the CLI at the standby follows it to the leader, as the account (a MUNGE credential of its uid)
        mung = {"FAIRPOD_MUNGE_SOCKET": str(msock)}  # this "host"'s munged (no FAIRPOD_AUTH: the socket is used)
        out = on_standby.cli(alice, "start-job", "--name", "via-standby", "--team", "john", "--", "true",
                             extra=mung).stdout
        assert "via-standby" in out
        assert ha.request("GET", "/jobs/via-standby").json()["user"] == alice.name
        # the leader dies; the standby leads and its socket is the way in, as the same account
        ha.kill(lead)
        wait_for(standby.leading, 60, "the standby to take over")
        out = on_standby.cli(alice, "start-job", "--name", "after-failover", "--team", "john", "--", "sh", "-c",
                             "id -un > who.txt", extra=mung).stdout
        assert "after-failover" in out
        job = wait_for(lambda: (j := ha.request("GET", "/jobs/after-failover").json())["state"] in
                       ("Succeeded", "Failed") and j, 90, "after-failover to end")
        assert job["state"] == "Succeeded" and job["user"] == alice.name, job
        who = alice.dir / "who.txt"
        assert who.read_text().strip() == alice.name and who.stat().st_uid == alice.pw.pw_uid
        # the dead leader's socket answers no one (a stale file at most): the CLI there says so in one line
        r = on_lead.cli(alice, "list-jobs", check=False)
        assert r.returncode != 0 and re.search(r"cannot reach the fairpod server at unix:", r.stderr), r.stderr
    finally:
        if ha is not None:
            ha.stop_all()
        stop_munged(munged)
        if alice is not None:
            _remove(alice)
        shutil.rmtree(base, ignore_errors=True)
