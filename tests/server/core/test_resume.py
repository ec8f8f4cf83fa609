"""Auto-resume after a replica dies, retries used up, and a command that does not exist."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from ..conftest import Server, wait_for

SCRIPT = r'''
import os, time
if int(os.environ["FAIRPOD_RESTART_COUNT"]) < int(os.environ["CRASHES"]):
    time.sleep(120)
print("finished on restart", os.environ["FAIRPOD_RESTART_COUNT"], flush=True)
'''


def _child_pid(server: Server, job_id: int, name: str, attempt: int, rank: int = 0) -> int:
    f = server.home / "runs" / f"{name}-{job_id}" / str(attempt) / str(rank) / "child.pid"
    return wait_for(lambda: f.exists() and int(f.read_text().split()[0]), 20, f"{f}")


def test_auto_resume_after_a_replica_is_killed(server: Server, tmp_path: Path):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    job = server.submit(name="resilient", team="john", nodes=2, auto_resume=True, max_retry=2,
                        env={"CRASHES": "1"}, command=[sys.executable, str(script)])
    server.wait_state("resilient", "Running")
    os.kill(_child_pid(server, job["id"], "resilient", 0, rank=1), signal.SIGKILL)
    done = server.wait_state("resilient", "Succeeded", 40)
    assert done["restarts"] == 1
    ev = [e for e in done["events"] if e["kind"] == "JobRestarting"]
    assert len(ev) == 1 and "replica 1 killed by SIGKILL" in ev[0]["message"], ev
    assert "finished on restart 1" in server.cli("get-logs", "resilient").stdout


def test_retries_used_up_fail_with_the_reason(server: Server, tmp_path: Path):
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    job = server.submit(name="fragile", team="smith", auto_resume=True, max_retry=1, env={"CRASHES": "5"},
                        command=[sys.executable, str(script)])
    for attempt in range(2):
        wait_for(lambda a=attempt: server.job("fragile")["restarts"] == a, 20, f"attempt {attempt}")
        os.kill(_child_pid(server, job["id"], "fragile", attempt), signal.SIGKILL)
    failed = server.wait_state("fragile", "Failed", 30)
    assert failed["restarts"] == 1 and failed["reason"] == "replica 0 killed by SIGKILL"


def test_a_command_that_does_not_exist_fails_clearly(server: Server):
    server.submit(name="typo", team="john", command=["definitely-not-a-command-xyz", "--flag"])
    failed = server.wait_state("typo", "Failed", 20)
    assert "command not found: definitely-not-a-command-xyz" in failed["reason"]
    r = server.cli("get-job", "typo")
    assert "command not found" in r.stdout
