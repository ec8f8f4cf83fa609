"""A service's readiness command, run by each replica's supervisor inside that replica's sandbox.

A readiness command is the job's own code: it never runs in the control plane (which would run it as fairpod's
user, root by default, with the server's environment and files). The supervisor that started the replica runs it
every :data:`PERIOD` seconds while the command lives, exactly where the command runs:

- in the replica's cgroup (its CPU, memory and pids limits count the probe too);
- in the replica's mount and PID namespaces, entered with ``setns(2)`` (:func:`fairpod.sandbox.namespaces.join`):
  it sees the replica's files (its private ``/tmp``, its checkpoint directory), and what the replica's view hides
  (fairpod's state directory, the runs and checkpoint roots, the CLI config) stays hidden; a container replica's
  probe is ``<engine> exec`` in its container;
- as the replica's user, with the replica's environment (``PORT`` among it, plus ``FAIRPOD_SERVICE_HOST``), in its
  working directory;
- for at most :data:`TIMEOUT` seconds (then SIGKILL to its process group), its output discarded.

The result goes to ``ready.json`` in the replica's run directory (``{"ready", "detail", "at"}``, written when it
changes); the executor hands it to the control plane (``Probing.probed_ready``), which reads a file and runs
nothing. The file is removed when the supervisor starts and when the replica ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fairpod.executors import state

PERIOD = 1.0  # seconds from the end of one probe to the start of the next
TIMEOUT = 5.0  # a probe still running then is killed and counts as not ready


class ReadyCheck:
    """The readiness probes of one replica (driven by its supervisor's loop)."""

    def __init__(self, rdir: Path, command: list[str]) -> None:
        self.path = rdir / state.READY
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.next_at = time.monotonic()  # the first probe once the command has started
        self.last: tuple[bool, str] | None = None
        self.path.unlink(missing_ok=True)

    def wake_in(self, now: float) -> float:
        """Seconds until this needs the supervisor's loop again."""
        if self.proc is not None:
            return max(0.0, self.started + TIMEOUT - now)
        return max(0.0, self.next_at - now)

    def step(self, now: float, launch: Callable[[], subprocess.Popen[bytes]]) -> None:
        """Start a probe that is due (``launch`` starts it in the sandbox), or kill one past its time."""
        if self.proc is not None:
            if now - self.started >= TIMEOUT:
                _kill(self.proc.pid)
            return
        if now < self.next_at:
            return
        self.started = now
        try:
            self.proc = launch()
        except (OSError, subprocess.SubprocessError) as e:
            self._result(False, f"cannot start the readiness command: {e}", now)

    def reaped(self, pid: int, status: int) -> bool:
        """The supervisor reaped ``pid``: True when it was the probe (its result is recorded)."""
        if self.proc is None or pid != self.proc.pid:
            return False
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        now = time.monotonic()
        took = now - self.started
        if os.WIFEXITED(status):
            code = os.WEXITSTATUS(status)
            self._result(code == 0, f"exited {code}", now)
        elif took >= TIMEOUT:
            self._result(False, f"timed out after {TIMEOUT:g} s", now)
        else:
            self._result(False, f"killed by signal {os.WTERMSIG(status)}", now)
        return True

    def _result(self, ready: bool, detail: str, now: float) -> None:
        self.proc = None
        self.next_at = now + PERIOD
        if self.last != (ready, detail):
            self.last = (ready, detail)
            try:
                state.write_json(self.path, {"ready": ready, "detail": detail, "at": time.time()})
            except OSError:  # a full disk: the replica counts as it was until the next write
                pass

    def stop(self) -> None:
        """The replica is ending: no more probes, the one running killed, the result gone."""
        if self.proc is not None:
            _kill(self.proc.pid)
        self.next_at = float("inf")
        self.path.unlink(missing_ok=True)


def _kill(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def popen(argv: list[str], env: dict[str, str], cwd: str | None,
          preexec: Callable[[], None] | None) -> subprocess.Popen[bytes]:
    """A probe's process: its own session (its group is what a timeout kills), no input, output discarded."""
    return subprocess.Popen(argv, cwd=cwd, env=env, preexec_fn=preexec, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            close_fds=True)


def ready_ranks(adir: Path) -> set[int]:
    """The ranks of an attempt (``<runs>/<job>/<attempt>``) whose last readiness probe passed."""
    try:
        dirs = [d for d in adir.iterdir() if d.name.isdigit()]
    except OSError:
        return set()
    out = set()
    for d in dirs:
        rec: dict[str, Any] | None = state.read_json(d / state.READY)
        if rec is not None and rec.get("ready") is True:
            out.add(int(d.name))
    return out
