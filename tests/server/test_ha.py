"""Standby control planes (``fairpod up --ha``) on one real PostgreSQL: election, fencing, takeover.

The chaos test runs real ``fairpod up`` processes on 127.0.0.x and the local executor (a shared runs
directory); jobs stream in while the leader is killed (SIGKILL), stopped for longer than its lease (SIGSTOP,
then SIGCONT after the takeover), or cut off from the database (its role may not log in and its sessions are
ended). The suite runs one failover of each kind; ``benchmarks/takeover.py`` runs 20 and measures them.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.store.conftest import pg_url, wipe  # noqa: F401  (the fixture: a real PostgreSQL server)

from .ha_cluster import HaCluster, wait_for


@pytest.fixture
def ha(tmp_path: Path, pg_url: str) -> Iterator[HaCluster]:  # noqa: F811
    from fairpod.store import Store

    s = Store(pg_url)
    wipe(s.engine)
    with s.engine.begin() as c:
        c.execute(text("DROP TABLE IF EXISTS ha_lease, ha_members, ha_test_roles, ha_test_violations"))
    s.close()
    cluster = HaCluster(tmp_path, pg_url, n=2, lease=3.0)
    try:
        yield cluster
    finally:
        cluster.stop_all()


def failover(ha: HaCluster, kind: str) -> float:
    """One failover of ``kind``; the seconds from the fault until another node serves as the leader."""
    old = ha.leader()
    assert old.proc is not None
    t0 = time.monotonic()
    if kind == "kill":
        ha.kill(old)
    elif kind == "stop":
        old.proc.send_signal(signal.SIGSTOP)
    else:
        ha.cut(old)
    new = ha.leader(timeout=60, besides=old)
    took = time.monotonic() - t0
    if kind == "kill":
        ha.start(old.i)
    elif kind == "stop":
        old.proc.send_signal(signal.SIGCONT)
    else:
        ha.heal(old)
    wait_for(old.standing_by, 60, f"node {old.i} to stand by again after {kind}")
    assert new.leading()
    return took


def test_failovers_run_every_job_once_and_no_fenced_leader_writes(ha: HaCluster):
    ha.boot()
    names: list[str] = []
    expect: dict[str, str] = {}
    stop = threading.Event()
    errors: list[BaseException] = []

    def stream() -> None:
        k = 0
        while not stop.is_set() and k < 200:
            name = f"j{k}"
            code = 3 if k % 5 == 4 else 0
            try:
                ha.submit(name, seconds=0.5 + (k % 4), code=code)
            except BaseException as e:  # noqa: BLE001 - reported by the test
                errors.append(e)
                return
            names.append(name)
            expect[name] = "Failed" if code else "Succeeded"
            k += 1
            stop.wait(0.3)

    t = threading.Thread(target=stream, daemon=True)
    t.start()
    took = []
    try:
        wait_for(lambda: len(names) >= 3, 60, "the first jobs")
        for kind in ("kill", "stop", "cut"):
            took.append(failover(ha, kind))
            wait_for(lambda seen=len(names): errors or len(names) >= seen + 2, 60,  # noqa: B008 - the count now
                     "more jobs after the takeover")
            assert not errors, errors
    finally:
        stop.set()
        t.join(timeout=60)
    assert not errors, errors
    final = ("Succeeded", "Failed", "Cancelled")
    jobs = wait_for(lambda: (js := ha.jobs()) and all(j["state"] in final for j in js) and js, 120,
                    "every job to finish")
    by_name = {j["name"]: j for j in jobs}
    assert sorted(by_name) == sorted(names)  # every accepted submit is one job, none twice
    for name in names:
        assert by_name[name]["state"] == expect[name], (name, by_name[name])
        runs = (ha.marks / name).read_text().split("\n")[:-1]
        assert len(runs) == 1, (name, runs)  # run exactly once: no job was restarted or launched twice
    assert ha.violations() == []  # no write by a control plane that did not hold the lease
    stepped = [n for n in ha.nodes if "stepping down" in n.log_text()]
    assert stepped, "the stopped and the cut leader say in their log that they stepped down"
    assert all(t < 30 for t in took), took


def test_a_paused_leader_is_fenced_and_steps_down(ha: HaCluster):
    ha.boot()
    old = ha.leader()
    ha.submit("long", seconds=30, code=0)
    wait_for(lambda: (ha.marks / "long").exists(), 30, "the job to run")
    assert old.proc is not None
    old.proc.send_signal(signal.SIGSTOP)
    new = ha.leader(timeout=60, besides=old)
    old.proc.send_signal(signal.SIGCONT)
    wait_for(old.standing_by, 60, "the old leader to stand by")
    log = old.log_text()
    assert "stepping down" in log and "restarting as a standby" in log
    assert ha.violations() == []
    assert new.leading()
    r = ha.request("GET", "/jobs/long")
    assert r.json()["state"] == "Running"  # the takeover re-attached to it; nothing stopped it
    assert len((ha.marks / "long").read_text().splitlines()) == 1


def test_ha_needs_postgresql(tmp_path: Path):
    env = {"FAIRPOD_HOME": str(tmp_path / "h"), "FAIRPOD_CONFIG": str(tmp_path / "c.json"), "HOME": str(tmp_path),
           "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "up", "--ha", "--port", "1"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "needs a PostgreSQL database" in r.stderr
    assert not (tmp_path / "h").exists()
