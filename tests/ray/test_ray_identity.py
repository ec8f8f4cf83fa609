"""Users as themselves across hosts (``cluster.identity: unix``, docs/identity.md): a Unix account made by the test
submits from a second "host" with MUNGE, and its job runs on a Ray node of another address as that account.

What stands for two hosts: the session's Ray cluster has its head on 127.0.0.2 and its nodes on 127.0.0.3, ...
(tests/ray/cluster.py), the control plane listens on the head's address, and two ``munged`` of this machine with one
key stand for the munged of the control plane's host and of the user's host (each its own socket, seed and state:
the credential is made by one and decoded by the other, as across hosts). They share this machine's kernel,
accounts and files: the account exists with one uid "everywhere", as NIS/LDAP or one /etc/passwd gives a real
cluster. A third ``munged`` with another key is a host outside the cluster: its credentials are refused.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..server.access.test_identity_live import (  # noqa: F401
    Account,
    Env,
    _account,
    _remove,
    pytestmark,
    start_munged,
    stop_munged,
)
from .cluster import RayTestCluster
from .conftest import RayServer, seed_spec_data, serving


@pytest.fixture
def base() -> Iterator[Path]:
    # not under pytest's tmp (0700 root): the account must reach its directory and its job's checkpoints
    d = Path(tempfile.mkdtemp(prefix="fairpod-ray-identity-", dir="/var/tmp"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_munge_user_runs_as_itself_on_another_node(base: Path, ray_cluster: RayTestCluster, ray_driver: Any):
    acc: Account | None = None
    daemons: list[Any] = []
    try:
        acc = _account("r", base)
        server_munged, server_sock = start_munged(base / "munge-cp")  # the control plane's host
        daemons.append(server_munged)
        user_munged, user_sock = start_munged(base / "munge-user", key=base / "munge-cp" / "munge.key")
        daemons.append(user_munged)
        stranger, stranger_sock = start_munged(base / "munge-stranger")  # its own key: not of this cluster
        daemons.append(stranger)
        spec = seed_spec_data()
        spec.setdefault("cluster", {})["identity"] = "unix"
        spec["teams"][0]["unix_group"] = acc.group  # john
        (base / "server").mkdir(mode=0o755)
        for s in serving(ray_cluster, ray_driver, base / "server", yaml.safe_load(yaml.safe_dump(spec)),
                         before_start=lambda srv: _at_head(srv, ray_cluster.head_ip, server_sock)):
            url = f"http://{ray_cluster.head_ip}:{s.port}"
            user = Env(None, base, base / "no-socket", user_sock, acc, acc)  # type: ignore[arg-type]
            script = 'echo "as $(id -un) groups $(id -Gn) uid $(id -u) on $FAIRPOD_NODE_ADDRESS"; id -un > who.txt'
            out = user.cli(acc, "start-job", "--name", "from-afar", "--team", "john", "--", "sh", "-c", script,
                           url=url, munge=True).stdout
            assert "from-afar" in out, out
            job = s.wait_state("from-afar", "Succeeded", timeout=120)
            assert job["user"] == acc.name, job
            log = s.api("GET", f"/jobs/{job['id']}/logs").text
            m = re.search(r"as (\S+) groups (.*) uid (\d+) on (\S+)", log)
            assert m, log
            assert m.group(1) == acc.name and int(m.group(3)) == acc.pw.pw_uid, log
            assert acc.group in m.group(2).split(), log  # its supplementary group, on that node
            assert m.group(4) in ray_cluster.ips.values() and m.group(4) != ray_cluster.head_ip, log  # another host
            who = acc.dir / "who.txt"
            assert who.read_text().strip() == acc.name and who.stat().st_uid == acc.pw.pw_uid
            # a credential of a host whose munged has another key: refused, nothing submitted
            stranger_user = Env(None, base, base / "no-socket", stranger_sock, acc, acc)  # type: ignore[arg-type]
            r = stranger_user.cli(acc, "start-job", "--name", "stranger", "--team", "john", "--", "true", url=url,
                                  munge=True, check=False)
            assert r.returncode != 0 and "the MUNGE credential was refused" in r.stderr, r.stderr
            assert s.api("GET", "/jobs/stranger").status_code == 404
    finally:
        for d in daemons:
            stop_munged(d)
        if acc is not None:
            _remove(acc)


def _at_head(s: RayServer, head_ip: str, munge_sock: Path) -> None:
    """The control plane on the Ray head's address, checking credentials with its host's munged; its Unix socket
    (identity unix) in the test's directory."""
    s.env.update(FAIRPOD_MUNGE_SOCKET=str(munge_sock), FAIRPOD_SOCKET=str(s.home.parent / "api.sock"))
    s.extra = ["--advertise-address", head_ip]
