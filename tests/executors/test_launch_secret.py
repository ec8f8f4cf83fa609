"""A replica's credentials (``FAIRPOD_TOKEN``) reach the process that runs its launch, whoever reads the launch first.

``launch.json`` rests without the job's token; ``secret.json`` (0600) holds it and is deleted by its one reader.
The local executor forks a recovering job's standby (:mod:`fairpod.executors.standby`) right beside the replica's
supervisor, and the executor and a Ray node agent read launches too: a standby that read the launch before the
supervisor took the token, and the replica ran without it (``fairpod.sdk`` then answered nothing: a survivor waiting
for its peer's replacement saw no restart and the job fell back to its checkpoint).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fairpod.executors import state

TOKEN = "job-token-of-replica-1"
# in a fresh interpreter: the supervisor and the standby set signal handlers and become a subreaper
READERS = """
import json, sys
from pathlib import Path
from fairpod.executors import standby, state, supervisor
rdir = Path(sys.argv[1])
standby.boxes(rdir)              # the executor, looking for the replica's cgroups
sb = standby.Standby(rdir)       # the standby, forked beside the supervisor, first
left = (rdir / state.SECRET).exists()
sup = supervisor.Supervisor(rdir)
print(json.dumps({"standby": sb.spec["env"].get("FAIRPOD_TOKEN"), "left": left,
                  "supervisor": sup.spec["env"].get("FAIRPOD_TOKEN"), "after": (rdir / state.SECRET).exists()}))
"""


def test_the_standby_and_the_executor_leave_the_token_to_the_supervisor(tmp_path: Path) -> None:
    rdir = tmp_path / "job-1" / "0" / "1"
    rdir.mkdir(parents=True)
    state.write_launch(rdir, {"command": [sys.executable, "train.py"], "spare": True, "grace_seconds": 2,
                              "env": {"FAIRPOD_TOKEN": TOKEN, "FAIRPOD_JOB_ID": "1", "RANK": "1"}})
    assert TOKEN not in (rdir / state.LAUNCH).read_text()  # it never rests beside the launch
    out = subprocess.run([sys.executable, "-c", READERS, str(rdir)], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"standby": None, "left": True, "supervisor": TOKEN, "after": False}, got


def test_a_launch_read_without_its_secret_keeps_it_for_the_one_that_runs_it(tmp_path: Path) -> None:
    state.write_launch(tmp_path, {"env": {"FAIRPOD_TOKEN": TOKEN, "A": "1"}})
    assert state.read_launch(tmp_path, secret=False) == {"env": {"A": "1"}}
    assert state.read_launch(tmp_path) == {"env": {"A": "1", "FAIRPOD_TOKEN": TOKEN}}
    assert state.read_launch(tmp_path) == {"env": {"A": "1"}}  # read once
