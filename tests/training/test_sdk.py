"""fairpod.sdk against a real control plane: progress reports, the job token's scope, SIGTERM handling,
resume information, and the engine preferring the victim that reported a checkpoint last."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from .conftest import Server, wait_for

TRAINER = r'''
import json, sys, time
from fairpod import sdk
ck = sdk.checkpoint_dir() / f"state-{sdk.rank()}.json"
step = json.loads(ck.read_text())["step"] if ck.exists() else 0
print(f"start step={step} resuming={sdk.is_resuming()} last={sdk.last_checkpoint()} "
      f"restart={sdk.restart_count()}", flush=True)
total, every = int(sys.argv[1]), int(sys.argv[2])
while step < total:
    time.sleep(0.02)
    step += 1
    stop = sdk.preemption_requested()
    if step % every == 0 or stop or step == total:
        with sdk.atomic_path(ck) as tmp:
            tmp.write_text(json.dumps({"step": step}))
        ok = sdk.report_progress(step=step, checkpoint=ck)
        print(f"saved step={step} reported={ok}", flush=True)
        if stop:
            print(f"preempted at step={step}", flush=True)
            sys.exit(0)
print(f"done step={step}", flush=True)
'''


def _trainer(tmp_path: Path) -> Path:
    p = tmp_path / "trainer.py"
    p.write_text(TRAINER)
    return p


def _launch_env(server: Server, job: dict, rank: int = 0) -> dict[str, str]:
    f = server.home / "runs" / f"{job['name']}-{job['id']}" / "0" / str(rank) / "launch.json"
    return wait_for(lambda: f.exists() and json.loads(f.read_text())["env"], 20, f"{f}")


def _token(server: Server, job: dict) -> str:
    log = server.home / "runs" / f"{job['name']}-{job['id']}" / "0" / "0" / "output.log"
    line = wait_for(lambda: log.exists() and re.search(r"^TOKEN=(\S+)$", log.read_text(), re.M), 20, f"{log}")
    return line.group(1)


def test_progress_is_recorded_and_a_preempted_job_resumes_from_it(server: Server, tmp_path: Path):
    trainer = _trainer(tmp_path)
    server.submit(name="john-train", team="john", nodes=2, command=["sleep", "120"])
    server.wait_state("john-train", "Running")
    smith = server.submit(name="smith-train", team="smith", nodes=2, termination_grace_seconds=10,
                          command=[sys.executable, str(trainer), "300", "25"])
    ckpt = server.home / "checkpoints" / "smith" / f"smith-train-{smith['id']}" / "state-0.json"

    # the first report reaches the control plane: get-job shows path, step and time
    j = wait_for(lambda: (x := server.job("smith-train"))["checkpoint"]["step"] and x, 30, "a progress report")
    assert j["checkpoint"]["path"] == str(ckpt)
    assert j["checkpoint"]["step"] % 25 == 0
    assert abs(j["checkpoint"]["at"] - time.time()) < 10
    shown = server.cli("get-job", "smith-train").stdout
    assert f"Checkpoint:      {ckpt} (step " in shown, shown

    # john reclaims: SIGTERM -> preemption_requested() -> save, report, exit 0
    server.submit(name="john-eval", team="john", nodes=1, command=["sleep", "3"])
    logs = wait_for(lambda: "preempted at step=" in (o := server.cli("get-logs", "smith-train").stdout) and o,
                    30, "smith's trainer to see the preemption")
    stopped_at = int(logs.split("preempted at step=")[1].split()[0])
    assert f"saved step={stopped_at} reported=True" in logs
    j = wait_for(lambda: (x := server.job("smith-train"))["preemptions"] == 1 and x, 20, "the requeue")
    assert j["checkpoint"]["step"] == stopped_at

    # resumed from it, told so by the SDK (the control plane's last checkpoint and is_resuming)
    done = server.wait_state("smith-train", "Succeeded", 90)
    out = server.cli("get-logs", "smith-train").stdout
    assert f"start step={stopped_at} resuming=True last=('{ckpt}', {stopped_at}) restart=0" in out, out
    assert "done step=300" in out
    assert done["checkpoint"]["step"] == 300 and done["restarts"] == 0
    server.api("POST", "/jobs/john-train/cancel")


def test_the_job_token_only_reports_progress_of_its_own_running_job(server: Server, tmp_path: Path):
    show = ["sh", "-c", "echo TOKEN=$FAIRPOD_TOKEN; exec sleep 30"]
    job = server.submit(name="tok", team="smith", command=show)
    other = server.submit(name="other", team="john", command=show)
    env = _launch_env(server, job)
    assert env["FAIRPOD_API_URL"] == server.url and env["FAIRPOD_JOB_ID"] == str(job["id"])
    assert "FAIRPOD_TOKEN" not in env  # launch.json never holds the credential
    token = _token(server, job)
    assert token.startswith("fpj.")
    assert _token(server, other) != token

    def post(ref: str, tok: str, body: dict | None = None) -> httpx.Response:
        return server.api("POST", f"/jobs/{ref}/progress", tok, json=body or {"step": 7})

    r = post(str(job["id"]), token, {"step": 7, "checkpoint": "/x/ck.pt"})
    assert r.status_code == 200, r.text
    assert r.json()["checkpoint"]["step"] == 7 and r.json()["checkpoint"]["path"] == "/x/ck.pt"
    assert post("tok", token).status_code == 200  # by name too
    r = post(str(other["id"]), token)
    assert r.status_code == 403 and "not for" in r.json()["detail"]
    r = server.api("GET", "/jobs", token)
    assert r.status_code == 403 and "only report the progress of its own job" in r.json()["detail"]
    r = server.api("POST", f"/jobs/{job['id']}/cancel", token)
    assert r.status_code == 403
    forged = token[:-4] + ("0000" if not token.endswith("0000") else "1111")
    assert post(str(job["id"]), forged).status_code == 401
    assert post(str(other["id"]), f"fpj.{other['id']}.{token.rsplit('.', 1)[1]}").status_code == 401
    r = post(str(job["id"]), token, {"step": -1})
    assert r.status_code == 422
    # a finished job's token is dead
    server.api("POST", f"/jobs/{job['id']}/cancel")
    server.wait_state("tok", "Cancelled", 20)
    r = post(str(job["id"]), token)
    assert r.status_code == 403 and "no longer valid" in r.json()["detail"]
    server.api("POST", f"/jobs/{other['id']}/cancel")


def test_the_last_reported_checkpoint_steers_the_choice_of_victim(server: Server, tmp_path: Path):
    """Two smith jobs borrow; the one that just checkpointed loses least and is preempted, although the
    tie-break without reports would pick the one started last."""
    reporter = tmp_path / "report.py"
    reporter.write_text("import sys, time\nfrom fairpod import sdk\n"
                        "while True:\n"
                        "    time.sleep(0.2)\n"
                        "    if open(sys.argv[1]).read().strip() == 'go':\n"
                        "        print('reported', sdk.report_progress(step=1, checkpoint=sys.argv[1]), flush=True)\n"
                        "        time.sleep(600)\n")
    flag = tmp_path / "flag"
    flag.write_text("wait")
    server.submit(name="john-train", team="john", nodes=2, command=["sleep", "120"])
    server.wait_state("john-train", "Running")
    server.submit(name="smith-a", team="smith", command=[sys.executable, str(reporter), str(flag)])
    server.wait_state("smith-a", "Running")
    time.sleep(1.0)
    server.submit(name="smith-b", team="smith", command=["sleep", "120"])
    server.wait_state("smith-b", "Running")
    flag.write_text("go")
    wait_for(lambda: "reported True" in server.cli("get-logs", "smith-a").stdout, 20, "smith-a's report")
    server.submit(name="john-eval", team="john", nodes=1, command=["sleep", "30"])
    victim = wait_for(lambda: [n for n in ("smith-a", "smith-b") if server.job(n)["preemptions"]], 20,
                      "a preemption")
    assert victim == ["smith-a"], victim
    assert server.job("smith-b")["state"] == "Running"
    for name in ("john-train", "john-eval", "smith-a", "smith-b"):
        server.api("POST", f"/jobs/{name}/cancel")


SDK_OUTSIDE = r'''
import json, os, signal, sys
from pathlib import Path
from fairpod import sdk
out = {}
out["in_fairpod"] = sdk.in_fairpod()
out["dir"] = str(sdk.checkpoint_dir())
out["restart"] = sdk.restart_count()
out["resuming"] = sdk.is_resuming()
out["report"] = sdk.report_progress(step=3, checkpoint="x")
calls = []
signal.signal(signal.SIGTERM, lambda s, f: calls.append(s))
out["before"] = sdk.preemption_requested()
os.kill(os.getpid(), signal.SIGTERM)
out["after"] = sdk.preemption_requested()
out["sync_without_torch_group"] = sdk.preemption_requested(sync=True)
out["previous_handler_called"] = calls == [signal.SIGTERM]
target = Path("ck.bin")
try:
    with sdk.atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed while writing")
except RuntimeError:
    pass
out["after_failed_write"] = sorted(os.listdir("."))
with sdk.atomic_path(target) as tmp:
    tmp.write_text("whole")
out["after_write"] = target.read_text()
d = Path("dcp")
with sdk.atomic_path(d) as tmp:
    tmp.mkdir(); (tmp / "a").write_text("1")
with sdk.atomic_path(d) as tmp:
    tmp.mkdir(); (tmp / "b").write_text("2")
out["dir_replaced"] = sorted(os.listdir(d))
try:
    sdk.report_progress(step=-1)
except ValueError as e:
    out["bad_step"] = str(e)
os.environ.update(FAIRPOD_API_URL="http://127.0.0.1:9", FAIRPOD_TOKEN="fpj.1.x", FAIRPOD_JOB_ID="1")
out["unreachable"] = [sdk.report_progress(step=1, timeout=2), sdk.report_progress(step=2, timeout=2)]
try:
    sdk.report_progress(step=1, strict=True, timeout=2)
except RuntimeError as e:
    out["strict"] = str(e)
os.environ["RANK"] = "1"
out["rank1"] = sdk.report_progress(step=1)
print(json.dumps(out))
'''


def test_sdk_outside_fairpod_and_its_edges(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIRPOD_", "SLURM_")) and k != "RANK"}
    r = subprocess.run([sys.executable, "-c", SDK_OUTSIDE], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["in_fairpod"] is False
    assert out["dir"] == "checkpoints" and (tmp_path / "checkpoints").is_dir()
    assert out["restart"] == 0 and out["resuming"] is False and out["report"] is False
    assert out["before"] is False and out["after"] is True and out["sync_without_torch_group"] is True
    assert out["previous_handler_called"] is True
    assert out["after_failed_write"] == ["checkpoints"]  # no half-written file, no temporary left
    assert out["after_write"] == "whole"
    assert out["dir_replaced"] == ["b"]
    assert "non-negative" in out["bad_step"]
    assert out["unreachable"] == [False, False]
    assert r.stderr.count("could not report progress") == 1  # warned once, training goes on
    assert "could not report progress" in out["strict"]
    assert out["rank1"] is False


def test_a_replica_without_its_token_is_told_so_once_not_taken_for_outside_fairpod(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIRPOD_", "SLURM_")) and k != "RANK"}
    env.update(FAIRPOD_API_URL="http://127.0.0.1:9", FAIRPOD_JOB_ID="7")  # no FAIRPOD_TOKEN
    code = "from fairpod import sdk; print(sdk.peer_restarts(), sdk.peer_restarts())"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["0", "0"], (r.stdout, r.stderr)
    assert r.stderr.count("FAIRPOD_TOKEN not set, http://127.0.0.1:9 not asked") == 1, r.stderr
