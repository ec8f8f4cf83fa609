"""The seed scenario with real PyTorch DDP (gloo on CPU), end to end on the local executor.

john's 2-node DDP job runs within quota (50 %); smith's identical 2-node job borrows the rest (100 %); john
reclaims a node: smith's job gets SIGTERM, all its ranks stop at the same step, rank 0 snapshots it, the job
waits in its queue and resumes from that snapshot. Then one of smith's training processes is killed: the job
auto-resumes from its last periodic snapshot. Both jobs must end at the same step with the same model, and
smith redoes at most one snapshot interval.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest

from .conftest import Server, wait_for

torch = pytest.importorskip("torch", reason="torch is not installed: the DDP example cannot run")

from .peerjob import children  # noqa: E402 - torch first

REPO = Path(__file__).resolve().parents[2]
DDP = REPO / "examples" / "ddp" / "ddp.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"
EPOCHS, SAVE_EVERY, DATASET, BATCH, WORKERS = 32, 4, 512, 32, 2
STEPS_PER_EPOCH = DATASET // WORKERS // BATCH
TOTAL = EPOCHS * STEPS_PER_EPOCH
INTERVAL = SAVE_EVERY * STEPS_PER_EPOCH  # steps between periodic snapshots
# each step at least this long: on an idle machine this model trains 40 steps a second, and the whole resumed run
# (191 steps) was over before one slow look of the test's had seen it start; at 20 a second it lasts 10 s or more
STEP_SECONDS = 0.05


def ddp_command() -> list[str]:
    """One torchrun per fairpod replica: 2 nodes x 1 process, static rendezvous on the job's port (two processes
    per node, and the kill of one of them, are test_seed_ddp's: here a process costs as much as a step of the
    scenario)."""
    return ["sh", "-c", f'exec "{TORCHRUN}" --nnodes "$NNODES" --nproc_per_node 1 --node_rank "$NODE_RANK" '
            f'--master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" "{DDP}" {EPOCHS} {SAVE_EVERY} '
            f'--dataset_size {DATASET} --batch_size {BATCH} --log_every 1 --timeout 60 --backend gloo '
            f'--min_step_seconds {STEP_SECONDS}']
    # gloo: the demo cluster's "nodes" are slots of this one host, whatever GPUs it has


def log(server: Server, job: dict, attempt: int, rank: int = 0) -> str:
    f = server.home / "runs" / f"{job['name']}-{job['id']}" / str(attempt) / str(rank) / "output.log"
    return f.read_text(errors="replace") if f.exists() else ""


def snapshot(server: Server, job: dict) -> dict:
    return torch.load(server.home / "checkpoints" / job["team"] / f"{job['name']}-{job['id']}" / "snapshot.pt",
                      weights_only=True)


def workers_of(pid: int) -> list[int]:
    """The training processes (``ddp.py``) below the replica's command ``pid`` (torchrun: its worker, a child or,
    in a sandbox of its own PID namespace, a descendant)."""
    out = []
    for d in children(pid):
        try:
            if b"ddp.py" in Path(f"/proc/{d}/cmdline").read_bytes():
                out.append(d)
        except OSError:
            continue
    return sorted(out)


def tree(pid: int) -> list[str]:
    """``pid`` and its descendants, each with its command line (what a failed wait says)."""
    out = []
    for d in [pid, *children(pid)]:
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ")[:200]
            out.append(f"{d}: {cmd.decode(errors='replace')}")
        except OSError:
            out.append(f"{d}: (gone)")
    return out


@pytest.mark.slow
@pytest.mark.timeout(1500)  # training takes as long as the machine is slow: its waits are bounded by stalls (no log
# output for 120 s) and 900 s each, not by the suite's 300 s per test
def test_ddp_job_preempted_by_a_reclaim_and_killed_resumes_to_the_same_model(server: Server):
    john = server.submit(name="john-train", team="john", nodes=2, workdir=str(REPO), command=ddp_command())
    server.wait_state("john-train", "Running")
    smith = server.submit(name="smith-train", team="smith", nodes=2, workdir=str(REPO), command=ddp_command(),
                          auto_resume=True, max_retry=2, termination_grace_seconds=20)
    j = server.wait_state("smith-train", "Running", 20)
    assert j["borrowed_from"] == {"john": 4}
    assert server.api("GET", "/cluster").json()["capacity"]["ml.g5.12xlarge"]["utilization"] == 1.0

    # smith's first periodic snapshot reaches the control plane through fairpod.sdk.report_progress
    first = wait_for(lambda: (x := server.job("smith-train")["checkpoint"])["step"] and x, 120,
                     "smith's first snapshot report", server.activity)
    assert first["step"] % INTERVAL == 0 and first["path"].endswith("snapshot.pt")
    assert server.job("john-train")["state"] == "Running", "john's job ended before the reclaim: make it longer"

    # john reclaims one node: smith is preempted, its ranks agree on a step, rank 0 snapshots it
    server.submit(name="john-eval", team="john", nodes=1, command=["sleep", "3"])
    j = wait_for(lambda: (x := server.job("smith-train"))["preemptions"] == 1 and x, 30, "the reclaim")
    assert "reclaimed by team john" in j["reason"]
    out = wait_for(lambda: "preempted at step" in (o := log(server, smith, 0)) and o, 60, "smith's snapshot", server.activity)
    preempted_at = int(re.search(r"preempted at step (\d+)", out).group(1))
    assert 0 < preempted_at < TOTAL
    assert f"(step {preempted_at}, preemption requested)" in out
    wait_for(lambda: "JobRequeued" in [e["kind"] for e in server.job("smith-train")["events"]], 60,
             "smith's replicas to stop and the job to go back to its queue")

    # back once john-eval is done: resumes exactly at the preempted step
    wait_for(lambda: server.job("john-eval")["state"] == "Succeeded", 60, "john-eval")
    out = wait_for(lambda: "Resuming training" in (o := log(server, smith, 0)) and o, 120, "smith's resume", server.activity)
    resumed_at = int(re.search(r"Resuming training from snapshot .*\(step (\d+), restart 0\)", out).group(1))
    assert resumed_at == preempted_at

    # a crash: kill the training process of replica 1 after the next periodic snapshot and a few steps. Two waits:
    # for a periodic snapshot after the resume (any before the last; as long as the machine is slow), then for a few
    # steps after it, with a quick poll of the log alone. One wait for both, polled with the progress measure
    # (which reads all of /proc, seconds on a loaded machine), once missed every window of a snapshot and 5 steps
    # until the training ended: the next snapshot moved the mark each time. Any kill before the end meets what
    # is checked below (the restart resumes from the last periodic snapshot; less than an interval redone).
    def periodic() -> int | None:
        snap_step = server.job("smith-train")["checkpoint"]["step"] or 0
        return snap_step if resumed_at < snap_step < TOTAL and snap_step % INTERVAL == 0 else None

    def rank0_steps() -> list[int]:
        return [int(s) for s in re.findall(r"\[RANK 0\] step (\d+) loss", log(server, smith, 0).split(
            "Resuming training")[-1])]

    last_periodic = wait_for(periodic, 120, "a periodic snapshot after the resume", server.activity)
    wait_for(lambda: max(rank0_steps(), default=0) >= last_periodic + 5, 60,
             f"rank 0 to train 5 steps past step {last_periodic}")
    child = server.home / "runs" / f"smith-train-{smith['id']}" / "0" / "1" / "child.pid"
    pid = int(child.read_text().split()[0])
    victims = workers_of(pid)
    assert len(victims) == 1, (victims, tree(pid), log(server, smith, 0, 1)[-2000:])
    os.kill(victims[0], signal.SIGKILL)

    done = server.wait_state("smith-train", "Succeeded", 120, server.activity)
    assert done["restarts"] == 1 and done["preemptions"] == 1
    restarted = [e for e in done["events"] if e["kind"] == "JobRestarting"]
    assert len(restarted) == 1 and "replica" in restarted[0]["message"]
    run2 = log(server, smith, 0).split("Resuming training")[-1]
    reached = max(int(s) for s in re.findall(r"\[RANK 0\] step (\d+) loss", run2))
    run3 = log(server, smith, 1)
    restart_from = int(re.search(r"Resuming training from snapshot .*\(step (\d+), restart 1\)", run3).group(1))
    redone = reached - restart_from
    assert restart_from >= last_periodic and restart_from % INTERVAL == 0
    assert 0 <= redone <= INTERVAL, (reached, restart_from)
    assert re.search(rf"done at step {TOTAL} \(epoch {EPOCHS}\)", run3)
    assert done["checkpoint"]["step"] == TOTAL

    # the undisturbed run and the interrupted one end with the same step count and the same model (up to
    # float rounding: a new DDP instance groups gradients into buckets differently for its first step)
    jd = server.wait_state("john-train", "Succeeded", 120, server.activity)
    assert jd["preemptions"] == 0 and jd["restarts"] == 0
    a, b = snapshot(server, john), snapshot(server, smith)
    assert a["STEP"] == b["STEP"] == TOTAL and a["EPOCHS_RUN"] == b["EPOCHS_RUN"] == EPOCHS
    for k, t in a["MODEL_STATE"].items():
        assert torch.allclose(t, b["MODEL_STATE"][k], rtol=0, atol=1e-4), k  # float reassociation only
    max_diff = max(float((t - b["MODEL_STATE"][k]).abs().max()) for k, t in a["MODEL_STATE"].items())
    figures = {"total_steps": TOTAL, "interval_steps": INTERVAL, "preempted_at": preempted_at,
               "redone_after_preemption": preempted_at - resumed_at, "killed_after_step": reached,
               "restarted_from": restart_from, "redone_after_kill": redone, "max_weight_difference": max_diff}
    print("DDP figures:", json.dumps(figures))
