"""Runtime limits and hang detection on a live server with real processes."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ..conftest import SEED_SPEC, Server, fake_nvml, wait_for


def events(s: Server, name: str, kind: str) -> list[str]:
    return [e["message"] for e in s.job(name)["events"] if e["kind"] == kind]


def test_runtime_limits_from_the_job_and_its_class(tmp_path: Path):
    spec = yaml.safe_load(SEED_SPEC.read_text())
    spec["policy"]["priority_classes"] += [
        {"name": "batch", "weight": 10, "default_max_runtime_seconds": 2, "max_runtime_seconds": 600,
         "on_runtime_limit": "requeue"}]
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    s = Server(tmp_path, tmp_path / "spec.yaml")
    s.start()
    try:
        s.cli("start-job", "--name", "capped", "--team", "john", "--max-runtime", "2", "--grace-seconds", "1",
              "--", "sleep", "120")
        s.submit(name="batchy", team="smith", priority="batch", termination_grace_seconds=1,
                 command=["sleep", "120"])
        done = s.wait_state("capped", "Failed", 30)
        assert done["reason"].startswith("runtime limit: the attempt ran") and "the limit is 2 s" in done["reason"]
        assert done["limits"]["max_runtime_seconds"] == 2 and done["limits"]["on_runtime_limit"] == "fail"
        wait_for(lambda: events(s, "batchy", "JobRuntimeLimit"), 30, "the class's limit to requeue batchy")
        assert "back to its queue" in events(s, "batchy", "JobRuntimeLimit")[0]
        wait_for(lambda: events(s, "batchy", "JobRequeued"), 30, "batchy to be requeued")
        job = s.job("batchy")
        assert job["state"] != "Failed" and job["limits"]["max_runtime_seconds"] == 2
        r = s.api("POST", "/jobs", json={"name": "greedy", "team": "john", "priority": "batch",
                                          "max_runtime_seconds": 601, "command": ["true"]})
        assert r.status_code == 400 and "above the 'batch' class's maximum of 600 s" in r.json()["detail"]
        r2 = s.cli("start-job", "--name", "greedy", "--team", "john", "--priority", "batch", "--max-runtime", "601",
                   "--", "true", check=False)
        assert r2.returncode == 1 and "--max-runtime: 601 s is above the 'batch' class's maximum" in r2.stderr, r2.stderr
        assert len(r2.stderr.strip().splitlines()) == 1
        r3 = s.cli("start-job", "--name", "x", "--team", "john", "--hang-timeout", "5", "--", "true", check=False)
        assert r3.returncode != 0 and "--hang-timeout" in r3.stderr and "Traceback" not in r3.stderr, r3.stderr
        s.api("POST", "/jobs/batchy/cancel")
    finally:
        s.kill()
        s.kill_replicas()


def test_hung_jobs_are_noticed_restarted_or_failed_and_busy_ones_are_left_alone(server: Server):
    s = server
    s.submit(name="quiet", team="john", hang_timeout_seconds=10, command=["sh", "-c", "echo start; sleep 120"])
    s.submit(name="stuck", team="john", hang_timeout_seconds=10, hang_action="restart", max_retry=1,
             termination_grace_seconds=1, command=["sleep", "120"])
    s.submit(name="chatty", team="smith", hang_timeout_seconds=10,
             command=["sh", "-c", "i=0; while [ $i -lt 40 ]; do echo $i; i=$((i+1)); sleep 1; done"])
    wait_for(lambda: events(s, "quiet", "JobHung"), 30, "quiet to be reported hung")
    (msg,) = events(s, "quiet", "JobHung")
    assert "no progress report and no output for" in msg and "hang timeout 10 s" in msg
    assert s.job("quiet")["state"] == "Running"  # notify only
    wait_for(lambda: s.job("stuck")["restarts"] == 1, 40, "stuck to be restarted")
    failed = s.wait_state("stuck", "Failed", 40)  # its one retry used up by the second hang
    assert failed["reason"].startswith("hung: no progress report and no output")
    assert [m.split(";")[1].strip() for m in events(s, "stuck", "JobHung")] == ["restarting it",
                                                                                "no retries left: it fails"]
    assert s.job("chatty")["state"] == "Running" and not events(s, "chatty", "JobHung")
    assert len(events(s, "quiet", "JobHung")) == 1  # one notice per episode
    for name in ("quiet", "chatty"):
        s.api("POST", f"/jobs/{name}/cancel")


def test_a_job_whose_gpus_sit_idle_is_hung_even_while_it_prints(tmp_path: Path):
    """FAKE NVML (tests only): the host's 2 GPUs report 0 % utilization."""
    s = Server(tmp_path)
    gpus = [{"name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{i}", "memory_mib": 81559, "utilization_pct": 0}
            for i in range(2)]
    nvml = fake_nvml(tmp_path / "nvml.json", gpus)
    s.env["FAIRPOD_FAKE_NVML"] = str(nvml)
    s.start()
    try:
        team = json.loads(s.cli("team", "list", "-o", "json").stdout)[0]["name"]
        s.submit(name="idle-gpu", team=team, accelerators=1, hang_timeout_seconds=10, hang_action="cancel",
                 termination_grace_seconds=1,
                 command=["sh", "-c", "i=0; while [ $i -lt 60 ]; do echo $i; i=$((i+1)); sleep 1; done"])
        done = s.wait_state("idle-gpu", "Cancelled", 40)
        assert done["reason"].startswith("hung: its GPUs were idle for")
    finally:
        s.kill()
        s.kill_replicas()
