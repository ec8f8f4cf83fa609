"""The files sandbox on the Ray executor: a member's job run by a Ray node agent finds nothing of the admin's or of
another team's (the CLI config, ``$FAIRPOD_HOME``'s database and ``job-token.key``, another team's run directory and
checkpoints, ``/proc/<pid>/environ`` of another job's replica), while its own checkpoint directory works.

Its own loopback Ray cluster (a head and one worker of 4 fake GPUs, so both jobs share a host), whose nodes run
replicas with the whole sandbox (``FAIRPOD_SANDBOX=full``; the session cluster of conftest.py gives limits only), and
with ``FAIRPOD_HOME`` and ``FAIRPOD_CONFIG`` of the server, as a node on the server's host (or one mounting the
shared ``FAIRPOD_HOME`` of docs/ray.md) has. Everything lives under /var/tmp, not /tmp: the replica's private /tmp
would hide it anyway, and the test is about what the sandbox hides on purpose.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.sandbox import namespaces, users

from ..server.conftest import wait_for
from .cluster import ITYPE, RayTestCluster, beside
from .conftest import RayServer, kill_recorded

VICTIM = ("echo ckpt-secret-smith > \"$FAIRPOD_CHECKPOINT_DIR/s\"; echo log-secret-smith; echo ready; "
          "exec sleep 120")
SECRETS = ("ckpt-secret-smith", "log-secret-smith", "env-secret-smith")


def probe(home: Path, config: Path, node_dir: Path) -> str:
    return f"""
id -un; echo "pid $$"
ls -la {home} {home}/runs {home}/checkpoints {config.parent} {node_dir} 2>&1
cat {config} {home}/job-token.key {home}/fairpod.db 2>&1 | head -c 300
for f in {home}/runs/*/*/*/output.log {node_dir}/*/*/*/*/output.log {home}/checkpoints/*/*/s; do cat "$f"; done 2>&1
for e in /proc/[0-9]*/environ; do tr '\\0' '\\n' < "$e"; done 2>/dev/null | grep -i secret
echo mine > "$FAIRPOD_CHECKPOINT_DIR/own" && cat "$FAIRPOD_CHECKPOINT_DIR/own"
echo probe-done
"""


@pytest.fixture
def base() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("needs root: per-team users")
    if why := namespaces.supported():
        pytest.skip(why)
    d = Path(tempfile.mkdtemp(prefix="fairpod-rayfiles-", dir="/var/tmp"))
    d.chmod(0o755)
    before = {p.pw_name for p in pwd.getpwall() if p.pw_name.startswith(users.PREFIX)}
    try:
        yield d
    finally:
        for p in pwd.getpwall():
            if p.pw_name.startswith(users.PREFIX) and p.pw_name not in before:
                subprocess.run(["userdel", "--force", p.pw_name], capture_output=True, check=False)
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def full_cluster(base: Path) -> Iterator[RayTestCluster]:
    (base / "ray").mkdir()
    c = RayTestCluster(base / "ray", beside(100))  # in the group "users", beside the session cluster
    c.env.update(FAIRPOD_SANDBOX="full", FAIRPOD_HOME=str(base / "home"), FAIRPOD_CONFIG=str(base / "config.json"))
    try:
        c.start_head()
        c.add_nodes([("w1", ITYPE, 4, False, 2)])
        yield c
    finally:
        c.shutdown()


def test_attack_through_a_ray_node_agent_finds_nothing(base: Path, full_cluster: RayTestCluster) -> None:
    s = RayServer(base, full_cluster)
    s.env["FAIRPOD_SANDBOX"] = "full"
    s.start()
    try:
        s.submit(name="victim", team="smith", command=["/bin/sh", "-c", VICTIM], workdir="/", accelerators=1,
                 env={"SECRET": "env-secret-smith"})
        s.wait_state("victim", "Running", timeout=120)

        def victim_log() -> str:
            return "".join(p.read_text(errors="replace") for p in s.node_dir.glob("**/victim*/0/*/output.log"))

        wait_for(lambda: "ready" in victim_log().splitlines(), 60,
                 f"the victim to write its secrets ({sorted(map(str, s.node_dir.glob('**/output.log')))})")
        cfg = Path(s.env["FAIRPOD_CONFIG"])
        assert s.token in cfg.read_text() and (s.home / "job-token.key").exists()  # there to be found
        s.submit(name="probe", team="john", command=["/bin/sh", "-c", probe(s.home, cfg, s.node_dir)], workdir="/",
                 accelerators=1)
        try:
            job = wait_for(lambda: (j := s.job("probe"))["state"] in ("Succeeded", "Failed") and j, 120,
                           "the probe to end")
        except AssertionError as e:
            raise AssertionError(f"{e}: {s.job('probe')}") from None
        assert job["state"] == "Succeeded", job

        def probe_log() -> str:  # the control plane's copy (the node's run directory goes with the job)
            return "".join(p.read_text(errors="replace") for p in (s.home / "runs").glob("probe*/0/0/output.log"))

        out = wait_for(lambda: "probe-done" in (t := probe_log()) and t, 30, "the probe's log")
        assert "probe-done" in out, out
        body = out.split(" ====\n", 1)[1]  # after fairpod's header, which quotes the script
        assert body.splitlines()[0] == "fairpod-john", body  # the team's own unprivileged user
        assert "mine" in body, body  # its own checkpoint directory is there and its own
        key = (s.home / "job-token.key").read_bytes()
        for secret in (*SECRETS, s.token):
            assert secret not in body, f"the probe read {secret!r}:\n{body}"
        assert key.decode(errors="replace")[:16] not in body
        assert job["state"] == "Succeeded"
        assert s.job("victim")["state"] == "Running"
        s.cancel_all(timeout=60)
    finally:
        s.kill(signal.SIGTERM)
        kill_recorded(s.node_dir)
