"""Standby control planes (``fairpod up --ha``) on one real PostgreSQL: election, fencing, takeover.

The chaos test runs real ``fairpod up`` processes on 127.0.200.x and the local executor (a shared runs
directory); jobs stream in while the leader is killed (SIGKILL), stopped for longer than its lease (SIGSTOP,
then SIGCONT after the takeover), or cut off from the database (its role may not log in and its sessions are
ended). The suite runs one failover of each kind; ``benchmarks/takeover.py`` runs 20 and measures them.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.store.conftest import pg_url  # noqa: F401  (the fixture: a real PostgreSQL server)

from ... import httpclient
from ..ha_cluster import (
    NET,
    SEED_SPEC,
    HaCluster,
    JobStream,
    check_outcome,
    empty_database,
    failover,
    free_port,
    wait_for,
)


@pytest.fixture
def ha(tmp_path: Path, pg_url: str) -> Iterator[HaCluster]:  # noqa: F811
    empty_database(pg_url)
    cluster = HaCluster(tmp_path, pg_url, n=2, lease=3.0)
    try:
        yield cluster
    finally:
        print(f"how the nodes stood at the end:{cluster.standing()}")  # shown when the test failed
        cluster.stop_all()


def test_failovers_run_every_job_once_and_no_fenced_leader_writes(ha: HaCluster):
    """One failover of each kind here (the benchmark runs 20: benchmarks/takeover.py)."""
    ha.boot()
    stream = JobStream(ha)
    stream.start()
    took = []
    try:
        stream.grown(3)
        for kind in ("kill", "stop", "cut"):
            took.append(failover(ha, kind))
            stream.grown(2)
    finally:
        stream.stop()
    assert not stream.errors, stream.errors
    check_outcome(ha, stream)
    evs = ha.request("GET", "/events", params={"limit": 2000}).json()["events"]
    elected = [e["message"] for e in evs if e["kind"] == "LeaderElected"]
    said = "\n".join(elected) + "\n" + "\n".join(f"node {n.i}: {ln}" for n in ha.nodes
                                                for ln in n.log_text().splitlines() if "lead" in ln or "step" in ln)
    assert len(elected) == 4 and sum(f" after http://{NET}." in m for m in elected) == 3, said
    stepped = [n for n in ha.nodes if "stepping down" in n.log_text()]
    assert stepped, "the stopped and the cut leader say in their log that they stepped down"
    assert all(t < 30 for t in took), took


def test_a_paused_leader_is_fenced_and_steps_down(ha: HaCluster):
    ha.boot()
    old = ha.leader()
    ha.submit("long", seconds=600, code=0, until_released=True)  # runs until released, however slow the takeover
    wait_for(lambda: (ha.marks / "long").exists(), 30, "the job to run")
    for k in range(3):  # they end while the leader is stopped: it finds their exits when it comes back
        ha.submit(f"short{k}", seconds=1, code=0)
    wait_for(lambda: all((ha.marks / f"short{k}").exists() for k in range(3)), 30, "the short jobs to run")
    assert old.proc is not None
    old.proc.send_signal(signal.SIGSTOP)
    new = ha.leader(timeout=60, besides=old)
    old.proc.send_signal(signal.SIGCONT)
    # it answers as a standby from the moment it steps down, before it logs why and restarts: wait for the log
    wait_for(lambda: "restarting as a standby" in old.log_text() and old.standing_by(), 60,
             "the old leader to restart as a standby")
    assert "stepping down" in old.log_text()
    assert ha.violations() == []
    assert new.leading()
    r = ha.request("GET", "/jobs/long")
    assert r.json()["state"] == "Running"  # the takeover re-attached to it; nothing stopped it
    assert len((ha.marks / "long").read_text().splitlines()) == 1
    for k in range(3):
        assert ha.request("GET", f"/jobs/short{k}").json()["state"] == "Succeeded"
    ha.release("long")


def test_ha_needs_postgresql(tmp_path: Path):
    env = {"FAIRPOD_HOME": str(tmp_path / "h"), "FAIRPOD_CONFIG": str(tmp_path / "c.json"), "HOME": str(tmp_path),
           "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "up", "--ha", "--port", "1"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "needs a PostgreSQL database" in r.stderr
    assert not (tmp_path / "h").exists()


def test_clients_follow_the_leader_and_status_shows_it(ha: HaCluster):
    from fairpod.server.access.jobtoken import issue

    ha.boot()
    lead = ha.leader()
    standby = next(n for n in ha.nodes if n is not lead)
    assert standby.standing_by()
    r = httpclient.get(standby.url + "/api/v1/jobs", headers={"Authorization": f"Bearer {ha.token}"}, timeout=5)
    assert r.status_code == 503 and r.headers["x-fairpod-leader"] == lead.url and lead.url in r.json()["detail"]
    page = httpclient.get(standby.url + "/", timeout=5)
    assert page.status_code == 307 and page.headers["location"] == lead.url + "/"
    env = {**standby.env, "FAIRPOD_URL": f"{standby.url},{lead.url}", "FAIRPOD_TOKEN": ha.token}
    cli = [sys.executable, "-m", "fairpod.cli.main"]
    st = subprocess.run([*cli, "status"], env=env, capture_output=True, text=True, timeout=60)
    assert st.returncode == 0, st.stderr
    line = next(ln for ln in st.stdout.splitlines() if ln.startswith("leader:"))
    assert lead.url in line and "epoch 1" in line and f"standbys: {standby.url}" in line
    sub = subprocess.run([*cli, "start-job", "--name", "via-standby", "--team", "john", "--", "true"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert sub.returncode == 0, sub.stderr
    assert ha.request("GET", "/jobs/via-standby").status_code == 200
    # a dead first address: the CLI goes on to the next one
    dead = f"http://127.0.0.1:{free_port()}"
    got = subprocess.run([*cli, "get-job", "via-standby", "-o", "json"], capture_output=True, text=True,
                         env={**env, "FAIRPOD_URL": f"{dead},{standby.url}"}, timeout=60)
    assert got.returncode == 0, got.stderr
    # metrics: the election's on both, events of the leader's election
    m = httpclient.get(standby.url + "/metrics", timeout=5).text
    assert "fairpod_leader 0" in m and "fairpod_fenced_writes_total 0" in m
    m = httpclient.get(lead.url + "/metrics", headers={"Authorization": f"Bearer {ha.token}"}, timeout=5).text
    assert "fairpod_leader 1" in m and "fairpod_build_info" in m
    evs = ha.request("GET", "/events", params={"limit": 1000}).json()["events"]
    assert any(e["kind"] == "LeaderElected" and lead.url in e["message"] for e in evs)
    # a standby started with another spec would write it beside the leader: refused in one line
    other = ha.tmp / "other.yaml"
    other.write_text(SEED_SPEC.read_text().replace("fair_share_weight: 100", "fair_share_weight: 90"))
    third = {**standby.env, "FAIRPOD_HOME": str(ha.tmp / "third"), "FAIRPOD_CONFIG": str(ha.tmp / "third.json")}
    r = subprocess.run([*cli, "up", "--ha", "--db", standby.db, "--spec", str(other), "--port", str(free_port())],
                       env=third, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "applies only to a new database" in r.stderr
    # the SDK: a replica's FAIRPOD_API_URL with a standby first
    jid = ha.submit("reporting", seconds=60, code=0)
    wait_for(lambda: ha.request("GET", "/jobs/reporting").json()["state"] == "Running", 30, "the job to run")
    secret = bytes.fromhex((ha.nodes[0].home / "job-token.key").read_text().strip())
    with ha.admin.connect() as conn:  # the job's incarnation, which its token is signed over
        incarnation = conn.execute(text("SELECT incarnation FROM jobs WHERE id = :i"), {"i": jid}).scalar()
    env = {**standby.env, "FAIRPOD_API_URL": f"{standby.url},{lead.url}",
           "FAIRPOD_TOKEN": issue(secret, jid, incarnation),
           "FAIRPOD_JOB_ID": str(jid)}
    r = subprocess.run([sys.executable, "-c", "import fairpod.sdk as s; s.report_progress(step=7, checkpoint='ck', "
                        "strict=True)"], env=env, capture_output=True, text=True, timeout=60, cwd=ha.tmp)
    assert r.returncode == 0, r.stderr
    assert ha.request("GET", "/jobs/reporting").json()["checkpoint"]["step"] == 7




def test_the_cli_names_every_address_it_could_not_reach(tmp_path: Path):
    urls = f"http://{NET}.2:{free_port()},http://{NET}.3:{free_port()}"
    env = {"FAIRPOD_URL": urls, "FAIRPOD_TOKEN": "fp_none", "FAIRPOD_CONFIG": str(tmp_path / "c.json"),
           "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "list-jobs"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert f"cannot reach any fairpod server of {urls.replace(',', ', ')}" in r.stderr
