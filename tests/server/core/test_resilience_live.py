"""Gang readiness and restarts in place on a live server with real processes (local executor)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ..conftest import SEED_SPEC, Server, running, wait_for

# A replica that records its PID, counts its runs, fails while told to, says it is ready and then polls its
# peers' restarts in place until the test lets it end (bounded: at most 60 s).
REPLICA = """
import os, sys, time, pathlib
from fairpod import sdk
d, crashes, ready = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "ready"
r = sdk.rank()
(d / f"pid-{r}-{os.getpid()}").touch()
n = d / f"runs-{r}"
k = int(n.read_text()) if n.exists() else 0
n.write_text(str(k + 1))
if r == 1 and k < crashes:
    print(f"rank 1 run {k}: crashing", flush=True)
    sys.exit(3)
if ready or r != 1:
    sdk.ready()
print(f"rank {r} up (replica restarts {sdk.replica_restarts()})", flush=True)
for _ in range(300):
    (d / f"gen-{r}").write_text(str(sdk.peer_restarts()))
    if (d / "done").exists():
        break
    time.sleep(0.2)
"""


def spec_with(tmp_path: Path, **policy: object) -> str:
    spec = yaml.safe_load(SEED_SPEC.read_text())
    spec["policy"].update(policy)
    return yaml.safe_dump(spec)


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, spec_with(tmp_path, ready_backoff_base_seconds=1, restart_backoff_base_seconds=1,
                                           ready_requeue_limit=1))


def kinds(s: Server, name: str, *wanted: str) -> list[dict]:
    r = s.api("GET", f"/jobs/{name}/events")
    assert r.status_code == 200, r.text
    return [e for e in r.json()["events"] if e["kind"] in wanted]


def job(tmp: Path, name: str, crashes: int, ready: str = "ready", nodes: int = 3, **extra: object) -> dict:
    (tmp / name).mkdir()
    script = tmp / "replica.py"
    script.write_text(REPLICA)
    return {"name": name, "team": "john", "nodes": nodes, "termination_grace_seconds": 1,
            "command": [sys.executable, str(script), str(tmp / name), str(crashes), ready], **extra}


def pids(d: Path, rank: int) -> list[str]:
    return sorted(p.name for p in d.glob(f"pid-{rank}-*"))


def test_a_replica_that_crashes_twice_is_restarted_in_place_while_the_others_keep_their_pids(
        srv: Server, tmp_path: Path) -> None:
    s, d = srv, tmp_path / "inplace"
    s.submit(**job(tmp_path, "inplace", crashes=2, restarts_in_place=2, restart_eval_period_seconds=600))
    wait_for(lambda: (d / "runs-1").exists() and (d / "runs-1").read_text() == "3", 60, "rank 1's third run")
    wait_for(lambda: all((d / f"gen-{r}").exists() and (d / f"gen-{r}").read_text() == "2" for r in (0, 2)),
             30, "ranks 0 and 2 to learn of both restarts (fairpod.sdk.peer_restarts)")
    assert len(pids(d, 0)) == 1 and len(pids(d, 2)) == 1, (pids(d, 0), pids(d, 2))  # never restarted
    assert len(pids(d, 1)) == 3
    got = s.job("inplace")
    assert got["state"] == "Running" and got["restarts"] == 0  # no full restart: still attempt 0
    assert got["goodput"]["lost_accelerator_seconds"]["restart"] > 0  # no checkpoint: each restart loses it all
    restarting = kinds(s, "inplace", "ReplicaRestarting")
    assert [e["data"]["restart"] for e in restarting] == ["in-place", "in-place"]
    assert "replica 1 exited 3; restarting it in place (1 of 2 within 600 s" in restarting[0]["message"]
    assert len(kinds(s, "inplace", "ReplicaRestarted")) == 2 and not kinds(s, "inplace", "JobRestarting")
    (d / "done").touch()
    done = s.wait_state("inplace", "Succeeded", 30)
    assert done["restarts"] == 0


def test_restarts_in_place_run_out_then_the_job_restarts_whole_then_fails(srv: Server, tmp_path: Path) -> None:
    s, d = srv, tmp_path / "loop"
    s.submit(**job(tmp_path, "loop", crashes=100, restarts_in_place=1, auto_resume=True, max_retry=1))
    failed = s.wait_state("loop", "Failed", 60)
    assert failed["reason"].startswith("replica 1 exited 3")
    evs = kinds(s, "loop", "ReplicaRestarting", "JobRestarting")
    assert [(e["kind"], e["data"]["restart"]) for e in evs] == [
        ("ReplicaRestarting", "in-place"), ("ReplicaRestarting", "full"), ("JobRestarting", "full"),
        ("ReplicaRestarting", "in-place"), ("ReplicaRestarting", "full")]
    assert len(pids(d, 1)) == 4 and len(pids(d, 0)) == 2  # rank 0: once per attempt


def test_a_replica_that_never_gets_ready_is_requeued_with_backoff_then_fails(srv: Server, tmp_path: Path) -> None:
    s, d = srv, tmp_path / "slow"
    s.submit(**job(tmp_path, "slow", crashes=0, ready="never", nodes=2, ready_signal="sdk", ready_timeout_seconds=5))
    s.submit(**job(tmp_path, "fine", crashes=0, nodes=2, ready_signal="sdk", ready_timeout_seconds=30))
    wait_for(lambda: kinds(s, "slow", "JobNotReady"), 30, "slow's readiness timeout")
    back = wait_for(lambda: (j := s.job("slow"))["state"] == "Pending" and j, 30, "slow back in its queue")
    # replica 1 never reports ready; replica 0 does, unless a loaded machine starts it later than the 5 s too
    named = r"not ready: replicas? (0, )?1 of 2 not reported ready within the readiness timeout of 5 s"
    assert re.match(rf"requeued: {named}; backing off 1 s", back["reason"]), back["reason"]
    assert back["restarts"] == 0  # a readiness timeout spends no retry
    failed = s.wait_state("slow", "Failed", 40)  # ready_requeue_limit 1: the second timeout fails it
    assert re.match(named, failed["reason"]), failed["reason"]
    msgs = [e["message"] for e in kinds(s, "slow", "JobNotReady")]
    assert len(msgs) == 2 and "it is requeued (readiness timeout 1)" in msgs[0] and "it fails" in msgs[1]
    # it ran twice, each time stopped (a loaded machine may stop a run before its program wrote its pid file)
    assert len(kinds(s, "slow", "JobStarted")) == 2
    ran = pids(d, 0) + pids(d, 1)
    assert len(ran) <= 4 and not any(Path("/proc", p.split("-")[2]).exists() for p in ran), ran
    assert s.job("fine")["state"] == "Running" and not kinds(s, "fine", "JobNotReady")
    (tmp_path / "fine" / "done").touch()
    s.wait_state("fine", "Succeeded", 30)


# A replica that prints a NaN loss on its first run only (rank 1), then loss lines until the test lets it end.
NAN = """
import os, sys, time, pathlib
d, r = pathlib.Path(sys.argv[1]), int(os.environ.get("RANK", "0"))
(d / f"pid-{r}-{os.getpid()}").touch()
n = d / f"runs-{r}"
k = int(n.read_text()) if n.exists() else 0
n.write_text(str(k + 1))
print("starting", flush=True)
if sys.argv[2] == "cuda":
    print("RuntimeError: CUDA error: an illegal memory access was encountered", flush=True)
for step in range(300):
    if (d / "done").exists():
        break
    if sys.argv[2] == "loss":
        loss = float("nan") if r == 1 and k == 0 and step == 3 else 1.0 / (step + 1)
        print(f"step {step} loss={loss:.3f}", flush=True)
    time.sleep(0.2)
"""


@pytest.fixture
def logsrv(tmp_path: Path) -> Iterator[Server]:
    """The training class has two log rules: a CUDA error fails the job; no step line within 3 s notifies."""
    spec = yaml.safe_load(SEED_SPEC.read_text())
    spec["policy"]["priority_classes"][1]["log_rules"] = [
        {"name": "cuda", "pattern": "CUDA error", "action": "fail"},
        {"name": "steps", "pattern": "^step ", "within_seconds": 3, "action": "notify"}]
    yield from running(tmp_path, yaml.safe_dump(spec))


def test_a_nan_line_restarts_its_replica_in_place_and_a_cuda_error_fails_the_job(logsrv: Server,
                                                                                   tmp_path: Path) -> None:
    s = logsrv
    script = tmp_path / "nan.py"
    script.write_text(NAN)
    for name in ("nan", "cuda", "quiet"):
        (tmp_path / name).mkdir()
    s.cli("start-job", "--name", "nan", "--team", "john", "--priority", "training", "--node-count", "2",
          "--grace-seconds", "1", "--log-rule", "nan", "restart_in_place", r"loss=nan",
          "--", sys.executable, str(script), str(tmp_path / "nan"), "loss")
    s.submit(name="cuda", team="smith", priority="training", termination_grace_seconds=1,
             command=[sys.executable, str(script), str(tmp_path / "cuda"), "cuda"])
    s.submit(name="quiet", team="smith", priority="training", termination_grace_seconds=1,
             command=[sys.executable, str(script), str(tmp_path / "quiet"), "none"])
    failed = s.wait_state("cuda", "Failed", 30)
    assert failed["reason"].startswith("log rule 'cuda' (a line matching /CUDA error/): replica 0 printed "
                                       "'RuntimeError: CUDA error: an illegal memory access"), failed["reason"]
    d = tmp_path / "nan"
    wait_for(lambda: (d / "runs-1").exists() and (d / "runs-1").read_text() == "2", 30, "rank 1's second run")
    fired = kinds(s, "nan", "LogRule")
    assert fired[0]["data"]["rule"] == "nan" and "replica 1 printed 'step 3 loss=nan'" in fired[0]["message"]
    restarting = kinds(s, "nan", "ReplicaRestarting")
    assert restarting[0]["data"]["restart"] == "in-place"
    assert "replica 1 log rule 'nan' (a line matching /loss=nan/): replica 1 printed" in restarting[0]["message"]
    assert len(pids(d, 0)) == 1 and len(pids(d, 1)) == 2  # rank 0 kept running
    assert s.job("nan")["state"] == "Running"
    wait_for(lambda: kinds(s, "quiet", "LogRule"), 30, "the class's start rule to notify of quiet")
    (note,) = kinds(s, "quiet", "LogRule")
    assert "log rule 'steps' (no line matching /^step / within 3 s of the start)" in note["message"]
    assert note["message"].endswith("; notify") and s.job("quiet")["state"] == "Running"
    bad = s.cli("start-job", "--name", "x", "--team", "john", "--log-rule", "nan", "fail", "loss=(", "--",
                "true", check=False)
    assert bad.returncode == 1 and bad.stderr.startswith("fairpod: error: --log-rule nan: pattern 'loss=(' is not a valid regular ") and "Traceback" not in \
        bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    for name in ("nan", "quiet"):
        (tmp_path / name / "done").touch()
        s.wait_state(name, "Succeeded", 30)
