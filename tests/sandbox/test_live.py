"""Through a real ``fairpod up`` (tests/server's ``Server``): the request sets the cgroup, an OOM is the job's
own failure, said plainly, and its usage is read back into the job."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.sandbox import cgroups

from .. import httpclient
from ..server.conftest import Server
from .conftest import live_server

HOG = "x = []\nwhile True: x.append(bytearray(8 * 2**20))"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    try:
        cgroups.detect()
    except cgroups.CgroupError as e:
        pytest.skip(f"no usable cgroup hierarchy on this host: {e}")
    yield from live_server(tmp_path, ("calm", "hog"))


def test_oom_fails_the_job_with_the_memory_reason_and_the_neighbour_runs_on(server: Server) -> None:
    server.submit(name="calm", team="smith", command=[sys.executable, "-c", "import time; time.sleep(120)"],
                  vcpu=0.5, memory_gib=0.25)
    server.wait_state("calm", "Running")
    server.submit(name="hog", team="john", command=[sys.executable, "-c", HOG], vcpu=0.5, memory_gib=0.25,
                  auto_resume=True, max_retry=1)
    job = server.wait_state("hog", "Failed", timeout=90)
    assert job["reason"] == "replica 0 exceeded its memory limit (0.25 GiB) and was killed"
    assert job["restarts"] == 1  # auto-resume counted it like any failure of the job, and retried once
    use = job["usage"]
    assert use["memory_peak_bytes"] <= 0.25 * 2**30 and use["cpu_seconds"] > 0
    assert server.job("calm")["state"] == "Running"
    out = server.cli("get-job", "hog", "-o", "json")
    assert '"memory_peak_bytes"' in out.stdout
    metrics = httpclient.get(server.url + "/metrics", headers={"Authorization": f"Bearer {server.token}"}).text
    cpu = next(ln for ln in metrics.splitlines() if ln.startswith('fairpod_job_cpu_seconds_total{team="john"}'))
    assert float(cpu.split()[-1]) > 0
    peak = next(ln for ln in metrics.splitlines() if ln.startswith('fairpod_job_memory_peak_bytes{team="john"}'))
    assert 0 < float(peak.split()[-1]) <= 0.25 * 2**30


def test_up_and_node_list_say_what_is_enforced(server: Server) -> None:
    from fairpod.sandbox import capabilities

    want = capabilities.host()
    nodes = server.api("GET", "/nodes").json()["nodes"]
    assert nodes and all(nd["enforced"] == want.view() for nd in nodes)
    table = server.cli("node", "list").stdout
    assert "ENFORCED" in table and "cpu,memory" in table
    kinds = ", ".join(k for k, v in want.view().items() if v)
    assert f"enforced: {kinds} (4 nodes)" in server.cli("status").stdout.splitlines()


def test_up_says_in_one_line_what_it_cannot_enforce(tmp_path: Path, full_sandbox: None) -> None:
    from fairpod.sandbox import capabilities

    from ..server.conftest import SEED_SPEC, free_port

    env = {**os.environ, "FAIRPOD_HOME": str(tmp_path / "home"), "FAIRPOD_CONFIG": str(tmp_path / "config.json"),
           "HOME": str(tmp_path)}
    cli = [sys.executable, "-m", "fairpod.cli.main"]
    up = subprocess.run([*cli, "up", "--port", str(free_port()), "--spec", str(SEED_SPEC)], env=env,
                        capture_output=True, text=True, timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        lines = [ln.strip() for ln in up.stdout.splitlines() if ln.strip().startswith("enforced:")]
        assert lines == [f"enforced:  {capabilities.host().line()}"]
    finally:
        subprocess.run([*cli, "down"], env=env, capture_output=True, timeout=120)
    env["FAIRPOD_SANDBOX"] = "limits"
    up = subprocess.run([*cli, "up", "--port", str(free_port()), "--spec", str(SEED_SPEC)], env=env,
                        capture_output=True, text=True, timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        lines = [ln.strip() for ln in up.stdout.splitlines() if ln.strip().startswith("enforced:")]
        assert len(lines) == 1 and lines[0].endswith("; not files: turned off (FAIRPOD_SANDBOX=limits)")
    finally:
        subprocess.run([*cli, "down"], env=env, capture_output=True, timeout=120)


def test_start_job_vcpu_and_memory_set_the_replicas_limits(server: Server) -> None:
    r = server.cli("start-job", "--name", "calm", "--team", "smith", "--vcpu", "0.5", "--memory", "256Mi", "--",
                   "/bin/sh", "-c", "cat /proc/self/cgroup; echo ready; exec sleep 120")
    assert r.returncode == 0, r.stderr
    server.wait_state("calm", "Running")
    log = wait_log(server, "calm")
    mem = next(ln.split(":", 2)[2] for ln in log.splitlines() if ":memory:" in ln)
    h = cgroups.detect()
    if h.kind == "v1":
        mount = next(p for p in h.bases["memory"].parents if p.parent == Path("/sys/fs/cgroup"))
        assert (mount / mem.lstrip("/") / "memory.limit_in_bytes").read_text().strip() == str(256 * 2**20)
        cpu = next(ln.split(":", 2)[2] for ln in log.splitlines() if ":cpu:" in ln or ":cpu,cpuacct:" in ln)
        cmount = next(p for p in h.bases["cpu"].parents if p.parent == Path("/sys/fs/cgroup"))
        assert (cmount / cpu.lstrip("/") / "cpu.cfs_quota_us").read_text().strip() == "50000"
    bad = server.cli("start-job", "--name", "huge", "--team", "smith", "--memory", "4096Gi", "--", "true",
                     check=False)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "more than one ml.g5.12xlarge node has" in bad.stderr and "Traceback" not in bad.stderr


def wait_log(server: Server, name: str) -> str:
    from .conftest import wait_for

    path = wait_for(lambda: next(iter((server.home / "runs").glob(f"{name}-*/0/0/output.log")), None), 30)
    return wait_for(lambda: t if "ready" in (t := path.read_text()).splitlines() else None, 30)


def required_spec() -> str:
    import yaml

    from ..server.conftest import SEED_SPEC

    data = yaml.safe_load(SEED_SPEC.read_text())
    data["cluster"]["isolation"] = "required"
    return yaml.safe_dump(data)


def test_isolation_required_keeps_jobs_off_a_host_that_cannot_enforce_it(tmp_path: Path) -> None:
    """FAIRPOD_SANDBOX=limits (the suite's) leaves files unenforced: under ``cluster.isolation: required`` the
    job waits, saying why; with the whole sandbox the same job runs."""
    try:
        cgroups.detect()
    except cgroups.CgroupError as e:
        pytest.skip(f"no usable cgroup hierarchy on this host: {e}")
    from .conftest import live_server

    gen = live_server(tmp_path / "a", ("strict",), required_spec())
    s = next(gen)
    try:
        s.submit(name="strict", team="john", command=["/bin/sh", "-c", "sleep 60"], workdir="/")
        job = wait_until(s, "strict", lambda j: j["reason"].startswith("no node enforces"))
        assert job["state"] == "Pending"
        assert job["reason"] == ("no node enforces files (cluster.isolation: required): files: turned off "
                                 "(FAIRPOD_SANDBOX=limits)")
    finally:
        gen.close()


def test_isolation_required_runs_jobs_where_everything_is_enforced(tmp_path: Path, full_sandbox: None) -> None:
    from fairpod.sandbox import capabilities

    if not all(capabilities.host().view().values()):
        pytest.skip(f"this host does not enforce everything: {capabilities.host().line()}")
    from .conftest import live_server, remove_users_made_since, team_users

    before = team_users()
    gen = live_server(tmp_path / "b", ("strict",), required_spec())
    s = next(gen)
    try:
        s.submit(name="strict", team="john", command=["/bin/sh", "-c", "exit 0"], workdir="/")
        s.wait_state("strict", "Succeeded", timeout=60)
    finally:
        gen.close()
        remove_users_made_since(before)


def wait_until(s: Server, name: str, pred: object) -> dict:
    from .conftest import wait_for

    return wait_for(lambda: j if pred(j := s.job(name)) else None, 30)  # type: ignore[operator]


BATCH = r"""#!/bin/bash
#SBATCH --nodes 2
#SBATCH --output=out/%x_%j.out
#FAIRPOD --team john
srun -l bash -c 'echo "task $SLURM_PROCID node $SLURM_NODEID"' | sort
echo "tmp: $(ls /tmp | tr '\n' ' ')"
"""


def test_an_sbatch_job_runs_its_steps_in_its_sandbox(tmp_path: Path, full_sandbox: None) -> None:
    """srun's steps run inside their node's replica, so in its sandbox; the nodes of the job meet in
    ``<checkpoint dir>.slurm``, which the sandbox keeps. ``run_as: root``: this suite's interpreter (which the
    batch runner needs) is under /root, where a per-team user cannot reach it."""
    import yaml

    from ..formats.slurm.test_sbatch_live import sbatch
    from ..server.conftest import SEED_SPEC
    from .conftest import live_server, wait_for

    if os.geteuid() != 0:
        pytest.skip("needs root (run_as: root)")
    data = yaml.safe_load(SEED_SPEC.read_text())
    data["cluster"]["run_as"] = "root"
    gen = live_server(tmp_path / "srv", ("batch",), yaml.safe_dump(data))
    s = next(gen)
    try:
        work = tmp_path / "work"
        work.mkdir()
        (work / "batch.sh").write_text(BATCH)
        r = sbatch(s, work, "--job-name", "batch", "batch.sh")
        assert r.returncode == 0, r.stderr
        s.wait_state("batch", "Succeeded", timeout=120)
        out = wait_for(lambda: next(iter((work / "out").glob("batch_*.out")), None), 30).read_text()
        assert "0: task 0 node 0" in out and "1: task 1 node 1" in out, out
        # a private /tmp: only the way to the job's own directories (this test's are under /tmp) and, for a
        # checkout under /tmp, to the interpreter and package it runs
        ways = {"pytest-of-root", *(p.parts[2] for p in (Path(sys.prefix), Path(__file__).resolve())
                                    if p.parts[1:2] == ("tmp",))}
        assert out.strip().splitlines()[-1] == "tmp: " + " ".join(sorted(ways)), out
    finally:
        gen.close()
