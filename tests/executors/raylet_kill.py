"""A Ray worker node whose raylet dies after ``ray start`` exited 0, made certain (tests/executors/
test_raycluster_node_up.py, the RayCluster of tests/server/core/test_rayjobs_live.py).

``site(folder, killed)`` writes a ``sitecustomize`` into ``folder`` to put on the worker's ``PYTHONPATH`` with
``FPTEST_KILLED=killed``: in the worker's ``ray start`` only (``--address`` among its arguments; not fairpod's
launcher, not Ray's own Python processes), at its exit, SIGKILL to the raylet it started (in its session), once:
the first to make the file ``killed`` does it. As a raylet that dies where it binds its port, after ``ray start``
has already returned 0."""

from __future__ import annotations

from pathlib import Path

SITECUSTOMIZE = """
import atexit, os, signal, sys
if "start" in sys.argv and "--address" in sys.argv and os.environ.get("FPTEST_KILLED"):
    def _kill():
        try:
            os.close(os.open(os.environ["FPTEST_KILLED"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            rest = stat[stat.rindex(")") + 2:].split()
            if stat[stat.index("(") + 1:stat.rindex(")")] == "raylet" and int(rest[3]) == os.getsid(0):
                os.kill(int(pid), signal.SIGKILL)
    atexit.register(_kill)
"""


def site(folder: Path) -> Path:
    """``folder`` with the ``sitecustomize`` in it (to put first on the worker's ``PYTHONPATH``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return folder
