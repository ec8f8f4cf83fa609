"""The seed post's sbatch script, unchanged in its Slurm and torchrun parts, running the DDP example on two
nodes: `srun --auto-resume=1 ./pt_cpu/bin/torchrun --rdzv_endpoint=$(hostname) …`. A killed training process
fails the step, the job restarts from the top of the script and the training resumes from its snapshot."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Activity, Server, wait_for

torch = pytest.importorskip("torch", reason="torch is not installed: the DDP example cannot run")

REPO = Path(__file__).resolve().parents[3]
SEED = Path(__file__).parent / "seed"
EPOCHS, SAVE_EVERY, DATASET = 24, 4, 512
STEPS_PER_EPOCH = DATASET // 4 // 32
TOTAL, INTERVAL = EPOCHS * STEPS_PER_EPOCH, SAVE_EVERY * STEPS_PER_EPOCH


def descendants(pid: int) -> list[tuple[int, bytes]]:
    kids: dict[int, list[int]] = {}
    cmd: dict[int, bytes] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                cmd[int(d.name)] = (d / "cmdline").read_bytes()
            except OSError:
                continue
            kids.setdefault(int(stat[stat.rfind(")") + 2 :].split()[1]), []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append((k, cmd.get(k, b"")))
            todo.append(k)
    return out


@pytest.mark.slow
@pytest.mark.timeout(1500)  # training takes as long as the machine is slow: its waits are bounded by stalls (no log
# output for 120 s) and 900 s each, not by the suite's 300 s per test
def test_seed_sbatch_script_runs_ddp_and_auto_resumes(server: Server, tmp_path: Path):
    shutil.copy(REPO / "examples" / "ddp" / "ddp.py", tmp_path / "ddp.py")  # $(dirname "$PWD")/ddp.py
    work = tmp_path / "slurm"
    (work / "pt_cpu" / "bin").mkdir(parents=True)
    (work / "pt_cpu" / "bin" / "torchrun").symlink_to(Path(sys.executable).parent / "torchrun")
    shutil.copy(SEED / "1.conda-train.sbatch", work / "1.conda-train.sbatch")
    env = {**server.env, "EPOCHS": str(EPOCHS), "SAVE_EVERY": str(SAVE_EVERY),
           "DDP_ARGS": f"--dataset_size {DATASET} --log_every 1 --timeout 60 --backend gloo"}
    r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "sbatch", "--team", "smith",
                        "1.conda-train.sbatch"], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    jid = int(re.fullmatch(r"Submitted batch job (\d+)\n", r.stdout).group(1))
    assert "auto-resume on: the script runs srun --auto-resume=1 (line 21)" in r.stderr
    job = server.wait_state(str(jid), "Running")

    def written() -> tuple[int, Activity]:  # srun's output file and the replicas' CPU: grow while they train
        out = sum(f.stat().st_size for f in (work / "logs").glob("*.out")) if (work / "logs").is_dir() else 0
        return out, server.activity()
    assert job["name"] == "cpu-ddp-conda" and job["nodes"] == 2 and job["auto_resume"] is True

    # the DDP processes report their snapshots through fairpod.sdk from inside srun's tasks
    wait_for(lambda: (server.job(str(jid))["checkpoint"]["step"] or 0) >= INTERVAL, 120, "the first snapshot",
             written)
    out_file = work / "logs" / f"cpu-ddp-conda_{jid}.out"
    text = out_file.read_text()
    assert re.search(r"srun: torchrun --rdzv_endpoint workers-\d+ -> 127\.0\.0\.1:\d+", text), text[:2000]
    child = server.home / "runs" / f"cpu-ddp-conda-{jid}" / "0" / "1" / "child.pid"
    workers = [p for p, c in descendants(int(child.read_text().split()[0])) if b"ddp.py" in c and b"torchrun" not in c]
    assert len(workers) == 2, workers
    os.kill(workers[0], signal.SIGKILL)

    done = server.wait_state(str(jid), "Succeeded", 120, written)
    # one restart for the kill; gloo on a loaded CPU has been seen to abort a rank on its own once (SIGABRT,
    # "terminate called without an active exception"), which auto-resume then also survives
    assert 1 <= done["restarts"] <= done["max_retry"] and done["checkpoint"]["step"] == TOTAL, done
    text = out_file.read_text()  # the restarted script appends to the same output file
    assert "srun: Terminating StepId=" in text and "srun: error: " in text
    resumed = re.search(r"Resuming training from snapshot at Epoch (\d+) batch 0 \(step (\d+), restart 1\)", text)
    assert resumed and int(resumed.group(2)) % INTERVAL == 0 and int(resumed.group(2)) >= INTERVAL
    assert f"done at step {TOTAL} (epoch {EPOCHS})" in text
    ev = [e for e in done["events"] if e["kind"] == "JobRestarting"]
    assert len(ev) == 1 and "replica 0 exited" in ev[0]["message"], ev
