"""A service's readiness command is the member's code: it runs inside the replica's sandbox, never in the control
plane. In-process: a real SQLite store, a control plane built in the test, the local executor with the whole sandbox
(as root: the per-team user, namespaces, cgroups) and the service prober (``Services.probe_once``, which the probe
thread calls). The attacks are those a member tried on a default ``fairpod up``: write ``/etc``, read the admin's
CLI config, the server's environment and state directory (database, job-token signing key); a probe that hangs or
floods its output must not stall the control plane."""

from __future__ import annotations

import os
import pwd
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fairpod.executors import readycheck, state
from fairpod.executors.local import LocalExecutor
from fairpod.model.jobs import JobSpec
from fairpod.model.services import ServiceSpec
from fairpod.model.spec import parse_spec
from fairpod.sandbox import namespaces, users
from fairpod.server.core.transitions.services import Services
from fairpod.server.nodes import sync_nodes
from fairpod.server.runs import job_key
from fairpod.server.runtime.wiring import control_plane
from fairpod.store import Store

from .conftest import remove_users_made_since, team_users, wait_for

SPEC = (Path(__file__).resolve().parents[2] / "examples" / "four" / "spec.yaml").read_text()  # 4 x unit1
SERVER_SECRET = "SERVER-ENV-SECRET-4711"



class Plane:
    def __init__(self, base: Path) -> None:
        self.home = base / "home"
        self.home.mkdir()
        self.config = base / "admin" / ".config" / "fairpod" / "config.json"  # the admin's CLI config
        self.config.parent.mkdir(parents=True)
        self.config.write_text('{"token": "TOKEN-OF-THE-ADMIN"}')
        (self.home / "job-token.key").write_text("KEY-OF-THE-SERVER")
        self.store = Store(f"sqlite:///{self.home / 'fairpod.db'}")
        self.store.create_all()
        cluster = parse_spec(yaml.safe_load(SPEC))
        sync_nodes(self.store, cluster)
        self.store.put_spec(cluster)
        self.executor = LocalExecutor(self.home / "runs")
        self.cp = control_plane(self.store, self.executor, self.home)
        self.services = Services(self.cp)  # its threads are not started: the test calls what the probe thread calls

    def service(self, name: str, check: str, nodes: int = 1) -> int:
        spec = JobSpec(name=name, team="john", command=["sleep", "300"], nodes=nodes, termination_grace_seconds=1,
                       service=ServiceSpec(readiness_command=["sh", "-c", check]))
        jid = self.cp.submit(spec, "tester").id
        wait_for(lambda: self._launched(jid), 30)
        return jid

    def _launched(self, jid: int) -> bool:
        self.cp.reconcile_once()
        run = self.cp.runs.get(jid)
        return run is not None and run.launched

    def close(self) -> None:
        for job in self.store.list_jobs(finished=False):
            self.executor.stop(job_key(job), job.attempt, 0.0)
        try:
            wait_for(lambda: not self.executor.running() or None, 15)
        finally:
            self.executor.close()
            self.store.close()


@pytest.fixture
def plane(full_sandbox: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Plane]:
    if os.geteuid() != 0:
        pytest.skip("needs root: the per-team user a default fairpod up runs replicas as")
    if why := namespaces.supported():
        pytest.skip(why)
    base = Path(tempfile.mkdtemp(prefix="fairpod-ready-", dir="/var/tmp"))  # not under /tmp, which is private anyway
    os.chmod(base, 0o755)  # as /var/lib: the team's user may traverse it to its own checkpoint directory
    monkeypatch.setenv("FAIRPOD_HOME", str(base / "home"))
    monkeypatch.setenv("FAIRPOD_CONFIG", str(base / "admin" / ".config" / "fairpod" / "config.json"))
    monkeypatch.setenv("HOME", str(base / "admin"))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SERVER_SECRET)  # the server's environment (supervisors inherit it)
    before = team_users()
    p = Plane(base)
    try:
        yield p
    finally:
        p.close()
        remove_users_made_since(before)
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_a_members_readiness_command_runs_in_the_replicas_sandbox(plane: Plane) -> None:
    etc = Path(f"/etc/fairpod-probe-{uuid.uuid4().hex[:8]}")
    home, cfg = plane.home, plane.config
    own = home / "checkpoints" / "john" / "chat-1"  # the service's own checkpoint directory (its first job: id 1)
    check = (f"exec > {own}/probe.out 2>&1; id -u; echo pwned > {etc} && echo wrote-etc; "
             f"cat {cfg}; ls -a {home}; cat {home}/job-token.key; env; echo probe-done")
    try:
        jid = plane.service("chat", check)
        job = plane.store.get_job(jid)
        assert job is not None and Path(plane.cp.checkpoint_root()) / "john" / job_key(job) == own
        port = plane.cp.runs[jid].ports[0]

        def ready() -> bool:
            plane.services.probe_once()
            return bool(plane.services.endpoints(jid))

        wait_for(ready, 30)
        assert plane.services.endpoints(jid) == [(0, "127.0.0.1", port)]
        out = (own / "probe.out").read_text()
        assert "probe-done" in out, out
        uid = out.splitlines()[0]
        assert uid == str(pwd.getpwnam(users.user_name("john")).pw_uid) and uid != "0", out  # the replica's user
        assert not etc.exists() and "wrote-etc" not in out, out
        for secret in ("TOKEN-OF-THE-ADMIN", "KEY-OF-THE-SERVER", SERVER_SECRET):
            assert secret not in out, f"the readiness command read {secret!r}:\n{out}"
        listed = set(out.splitlines())  # ls -a of the state directory: one name a line
        assert not listed & {"fairpod.db", "job-token.key", "runs"}, out
        assert f"PORT={port}" in out and "FAIRPOD_SERVICE_HOST=127.0.0.1" in out, out  # the replica's environment
    finally:
        etc.unlink(missing_ok=True)


def test_a_probe_that_hangs_or_floods_does_not_stall_the_control_plane(plane: Plane) -> None:
    jid = plane.service("stuck", 'if [ "$RANK" = 0 ]; then exec sleep 1000; else exec yes; fi', nodes=2)
    job = plane.store.get_job(jid)
    assert job is not None
    adir = plane.home / "runs" / job_key(job) / str(job.attempt)

    def timed_out() -> bool:
        t0 = time.monotonic()
        plane.services.probe_once()
        assert time.monotonic() - t0 < 1.0  # the control plane runs no probe: it reads what the supervisors found
        assert plane.services.endpoints(jid) == []
        recs = [state.read_json(adir / str(r) / state.READY) or {} for r in (0, 1)]
        return all(r.get("detail") == f"timed out after {readycheck.TIMEOUT:g} s" for r in recs)

    wait_for(timed_out, readycheck.TIMEOUT + 20)
