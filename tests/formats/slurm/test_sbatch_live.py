"""fairpod sbatch with a real server and real processes: the SLURM_* environment, srun across the job's
nodes, output files, exit codes, preemption and requeue of a batch job, squeue, sinfo and scancel."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from fairpod.formats.slurm.hostlist import compress

from .conftest import Server, wait_for

SCRIPT = r"""#!/bin/bash
#SBATCH --job-name=hello
#SBATCH --nodes 2
#SBATCH --ntasks-per-node=2
#SBATCH --output=logs/%x_%j.out
#SBATCH --error=logs/%x_%j.err
#SBATCH --time=10:00
#SBATCH --frobnicate=3
#FAIRPOD --team john
echo "batch host $(hostname) id=$SLURM_JOB_ID name=$SLURM_JOB_NAME nodes=$SLURM_JOB_NUM_NODES list=$SLURM_JOB_NODELIST nodeid=$SLURM_NODEID procid=$SLURM_PROCID ntasks=$SLURM_NTASKS var=$MY_VAR token=${GITHUB_TOKEN:-unset} args=$*"
nodes=( $( scontrol show hostnames $SLURM_JOB_NODELIST ) )
head_node=${nodes[0]}
head_node_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
echo "head=$head_node ip=$head_node_ip second=${nodes[1]}"
srun -l bash -c 'echo "task $SLURM_PROCID/$SLURM_NTASKS local $SLURM_LOCALID node $SLURM_NODEID host $(hostname) rank $RANK of $WORLD_SIZE"' | sort
srun -w "${nodes[1]}" bash -c 'echo "on-second $(hostname)" >&2'
srun --ntasks-per-node=1 bash -c 'exit $((3 + SLURM_NODEID))'
echo "srun exit=$?"
srun --no-such-option true
echo "bad option exit=$?"
exit 7
"""


def sbatch(server: Server, cwd: Path, *args: str, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fairpod.cli.main", "sbatch", *args], cwd=cwd,
                          env={**server.env, **(env or {})}, capture_output=True, text=True, timeout=timeout)


def test_batch_script_environment_srun_and_exit_codes(server: Server, tmp_path: Path):
    (tmp_path / "hello.sbatch").write_text(SCRIPT)
    r = sbatch(server, tmp_path, "--wait", "hello.sbatch", "a1", "a2",
               env={"MY_VAR": "exported", "GITHUB_TOKEN": "secret"})
    assert r.returncode == 7, r.stderr  # --wait: the batch script's exit status
    jid = int(re.fullmatch(r"Submitted batch job (\d+)\n", r.stdout).group(1))
    assert "line 7: --time has no effect on fairpod" in r.stderr
    assert "line 8: #SBATCH --frobnicate is not supported by fairpod and is ignored" in r.stderr
    assert "not exported (they look like credentials): GITHUB_TOKEN" in r.stderr

    job = server.job(str(jid))
    assert job["state"] == "Failed" and job["team"] == "john" and "replica 0 exited 7" in job["reason"]
    nodes = job["placement"]
    out = (tmp_path / "logs" / f"hello_{jid}.out").read_text()
    err = (tmp_path / "logs" / f"hello_{jid}.err").read_text()
    assert f"batch host {nodes[0]} id={jid} name=hello nodes=2 list={compress(nodes)} " in out, out
    assert "nodeid=0 procid=0 ntasks=4 var=exported token=unset args=a1 a2" in out
    assert f"head={nodes[0]} ip=127.0.0.1 second={nodes[1]}" in out
    for p in range(4):
        node = p // 2
        assert f"{p}: task {p}/4 local {p % 2} node {node} host {nodes[node]} rank {p} of 4" in out, out
    assert f"on-second {nodes[1]}" in err
    assert f"srun: error: {nodes[1]}: task 1: Exited with exit code 4" in err
    assert "srun exit=4" in out
    assert "unsupported option '--no-such-option'" in err and "bad option exit=1" in out
    # replica 1 served its tasks and keeps their output in its log too
    r1 = server.cli("get-logs", str(jid), "--replica", "1").stdout
    assert "task 2/4 local 0 node 1" in r1 and "the batch script has ended" in r1

    q = server.cli("squeue", "-t", "all").stdout.splitlines()
    assert q[0].split() == ["JOBID", "PARTITION", "NAME", "USER", "ACCOUNT", "ST", "TIME", "NODES",
                         "NODELIST(REASON)"]
    row = next(line.split() for line in q[1:] if line.split()[0] == str(jid))
    assert row[1:6] == ["ml.g5.12x", "hello", "admin", "john", "F"] and row[7] == "2"
    assert str(jid) not in server.cli("squeue").stdout.split()  # finished jobs only with -t
    data = json.loads(server.cli("squeue", "-t", "F", "--json").stdout)
    assert [j["job_id"] for j in data["jobs"]] == [jid]


TRAINER = r'''
import json, sys, time
from fairpod import sdk
ck = sdk.checkpoint_dir() / "state.json"
step = json.loads(ck.read_text())["step"] if ck.exists() else 0
print(f"start step={step} restart={sdk.restart_count()} resuming={sdk.is_resuming()}", flush=True)
while step < 1000:
    time.sleep(0.02)
    step += 1
    if step % 20 == 0 or sdk.preemption_requested():
        ck.write_text(json.dumps({"step": step}))
        sdk.report_progress(step=step, checkpoint=ck)
        if sdk.preemption_requested():
            print(f"checkpointed step={step}", flush=True)
            sys.exit(0)
print(f"done step={step}", flush=True)
'''


def test_a_batch_job_is_preempted_requeued_and_resumes(server: Server, tmp_path: Path):
    (tmp_path / "trainer.py").write_text(TRAINER)
    (tmp_path / "train.sbatch").write_text(f"""#!/bin/bash
#SBATCH -J smith-train -N 2 -o train-%j.out
echo "batch starts, restart $SLURM_RESTART_COUNT"
srun --ntasks=1 {sys.executable} trainer.py
""")
    server.submit(name="john-train", team="john", nodes=2, command=["sleep", "120"])
    server.wait_state("john-train", "Running")
    r = sbatch(server, tmp_path, "--parsable", "--account", "smith", "--grace-seconds", "10", "train.sbatch")
    assert r.returncode == 0, r.stderr
    jid = int(r.stdout)
    wait_for(lambda: (server.job(str(jid))["checkpoint"]["step"] or 0) >= 20, 60, "progress through srun")
    q = server.cli("squeue").stdout
    assert re.search(rf"\s{jid} ml\.g5\.12x smith-tr    admin    smith  R\s+\S+\s+2 workers-", q), q
    info = server.cli("sinfo").stdout.splitlines()
    assert info[0].split() == ["PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE", "NODELIST"]
    assert info[1].startswith("ml.g5.12xlarge*") and info[1].split()[3:5] == ["4", "alloc"]

    server.submit(name="john-eval", team="john", nodes=1, command=["sleep", "3"])
    wait_for(lambda: server.job(str(jid))["preemptions"] == 1, 30, "the reclaim")
    pending = wait_for(lambda: "PD" in (o := server.cli("squeue", "-j", str(jid)).stdout) and o, 30, "PD in squeue")
    assert "(" in pending.splitlines()[1]  # the reason instead of a node list
    job = server.wait_state(str(jid), "Succeeded", 90)
    assert job["preemptions"] == 1 and job["restarts"] == 0
    out = (tmp_path / f"train-{jid}.out").read_text()  # the requeued run appends to the same file
    stopped = int(re.search(r"checkpointed step=(\d+)", out).group(1))
    assert out.count("batch starts, restart 0") == 2
    assert "start step=0 restart=0 resuming=False" in out
    assert f"start step={stopped} restart=0 resuming=True" in out and "done step=1000" in out
    assert job["checkpoint"]["step"] == 1000
    server.api("POST", "/jobs/john-train/cancel")


def test_scancel_and_bad_scripts(server: Server, tmp_path: Path):
    (tmp_path / "long.sbatch").write_text("#!/bin/sh\n#SBATCH -A smith\nsrun sleep 60\n")
    r = sbatch(server, tmp_path, "long.sbatch")
    jid = r.stdout.split()[-1]
    server.wait_state(jid, "Running")
    r2 = sbatch(server, tmp_path, "--json", "long.sbatch")  # same name while the first runs: a suffix
    second = json.loads(r2.stdout)
    assert second["name"] == "long-sbatch-2", r2.stderr
    c = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "scancel", jid, str(second["id"]), "999"],
                       env=server.env, capture_output=True, text=True, timeout=60)
    assert c.returncode == 1 and "job 999" in c.stderr and c.stdout == ""
    server.wait_state(jid, "Cancelled", 30)
    for text, msg in [("echo no shebang\n", "first line must start with #!"),
                      ("#!/bin/sh\n#SBATCH --array=3-1\n#FAIRPOD --team smith\n", "'3-1' runs backwards"),
                      ("#!/bin/sh\n#SBATCH --nodes=9\n#FAIRPOD --team smith\n", "the cluster has 4")]:
        (tmp_path / "bad.sbatch").write_text(text)
        r = sbatch(server, tmp_path, "bad.sbatch")
        assert r.returncode != 0 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = sbatch(server, tmp_path, "missing.sbatch")
    assert r.returncode == 1 and "cannot read missing.sbatch" in r.stderr
    (tmp_path / "x.sbatch").write_text("#!/bin/sh\ntrue\n")
    r = sbatch(server, tmp_path, "x.sbatch")  # two teams, none named
    assert r.returncode == 1 and "which team?" in r.stderr
    r = sbatch(server, tmp_path, "--test-only", "--json", "--team", "john", "x.sbatch")
    assert r.returncode == 0 and json.loads(r.stdout)["job"]["team"] == "john"
    assert os.environ.get("FAIRPOD_SLURM_DIR") is None
    r = subprocess.run([sys.executable, "-m", "fairpod.formats.slurm.srun", "true"], capture_output=True, text=True,
                       timeout=30, env={k: v for k, v in os.environ.items() if k != "FAIRPOD_SLURM_DIR"})
    assert r.returncode == 1 and "not inside a job submitted with 'fairpod sbatch'" in r.stderr
