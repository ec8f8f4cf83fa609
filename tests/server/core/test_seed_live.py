"""The seed scenario with real processes: borrow, reclaim, SIGTERM + checkpoint, requeue, resume."""

from __future__ import annotations

import sys
from pathlib import Path

from ..conftest import Server, wait_for

TRAINER = r'''
import os, pathlib, signal, sys, time
ck = pathlib.Path(os.environ["FAIRPOD_CHECKPOINT_DIR"]) / f"rank{os.environ['RANK']}.txt"
step = int(ck.read_text()) if ck.exists() else 0
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
print(f"start step={step} restart={os.environ['FAIRPOD_RESTART_COUNT']} world={os.environ['WORLD_SIZE']}", flush=True)
while step < int(sys.argv[1]):
    if stop:
        ck.write_text(str(step))
        print(f"checkpointed step={step}", flush=True)
        sys.exit(0)
    step += 1
    time.sleep(0.02)
print(f"done step={step}", flush=True)
'''


def test_seed_scenario_live(server: Server, tmp_path: Path):
    trainer = tmp_path / "trainer.py"
    trainer.write_text(TRAINER)
    server.submit(name="john-train", team="john", nodes=2, command=["sleep", "60"])
    server.wait_state("john-train", "Running")
    cluster = server.api("GET", "/cluster").json()
    assert cluster["capacity"]["ml.g5.12xlarge"]["utilization"] == 0.5
    server.submit(name="smith-train", team="smith", nodes=2, termination_grace_seconds=10,
                  command=[sys.executable, str(trainer), "400"])
    smith = server.wait_state("smith-train", "Running")
    assert smith["borrowed_from"] == {"john": 4}
    # both replicas have their SIGTERM handler in place (they print after installing it)
    for r in ("0", "1"):
        wait_for(lambda r=r: "start step=0" in server.cli("get-logs", "smith-train", "--replica", r).stdout, 20,
                 f"smith's trainer, replica {r}")
    cluster = server.api("GET", "/cluster").json()
    assert cluster["capacity"]["ml.g5.12xlarge"]["utilization"] == 1.0
    rows = {t["team"]: t for t in cluster["teams"]}
    assert rows["smith"]["borrowed"] == 4 and rows["smith"]["borrowed_from"] == {"john": 4}
    assert rows["john"]["lent"] == 4

    server.submit(name="john-eval", team="john", nodes=1, command=["sleep", "2"])
    # smith's job is reclaimed: SIGTERM, it checkpoints and exits, goes back to its queue
    j = wait_for(lambda: (x := server.job("smith-train"))["preemptions"] == 1 and x, 20, "the reclaim")
    assert "reclaimed by team john" in j["reason"]
    server.wait_state("john-eval", "Running", 20)
    logs = wait_for(lambda: (o := server.cli("get-logs", "smith-train").stdout) and "checkpointed" in o and o,
                    20, "smith's checkpoint")
    ckpt_step = int(logs.split("checkpointed step=")[1].split()[0])
    assert ckpt_step > 0
    # the job goes back to its queue once both replicas have exited, which can be after the first one's
    # "checkpointed" line is read
    kinds = wait_for(lambda: "JobRequeued" in (k := [e["kind"] for e in server.job("smith-train")["events"]]) and k,
                     30, "smith's requeue")
    assert kinds.index("JobPreempted") < kinds.index("JobRequeued")
    # john-eval ends after 2 s; smith borrows again and resumes from its checkpoint
    server.wait_state("john-eval", "Succeeded", 30)
    done = server.wait_state("smith-train", "Succeeded", 60)
    assert done["restarts"] == 0 and done["preemptions"] == 1
    for r in ("0", "1"):  # each replica resumes from the step it checkpointed
        out = server.cli("get-logs", "smith-train", "--replica", r).stdout
        step = int(out.split("checkpointed step=")[1].split()[0])
        assert f"start step={step} " in out.split("checkpointed")[1], out
        assert "done step=400" in out
