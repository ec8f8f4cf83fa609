"""The client of a fork server of supervisors (:mod:`fairpod.executors.forkserver`): started on first use, it
forks each replica's supervisor in a few milliseconds instead of a new interpreter's tens. Used by the local
executor and by the Ray node agent (:mod:`fairpod.executors.ray_node`). ``FAIRPOD_FORKSERVER=0`` turns it off."""

from __future__ import annotations

import json
import os
import select
import subprocess
from collections.abc import Sequence
from pathlib import Path

from fairpod.executors import procs

FORKSERVER_ENV = "FAIRPOD_FORKSERVER"  # "0": start each supervisor as a new interpreter


class Forked:
    """A supervisor forked by the fork server (not our child): ``poll()`` as for a Popen, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.started = procs.start_time(pid)
        self.returncode: int | None = None if self.started is not None else -1

    def poll(self) -> int | None:
        if self.returncode is None and not procs.alive(self.pid, self.started):
            self.returncode = -1  # its exit status went to the fork server; status.json tells the rest
        return self.returncode


class ForkServerClient:
    """The executor's fork server of supervisors (:mod:`fairpod.executors.forkserver`), started on first use.
    ``spawn`` returns None when it cannot be used; the caller then starts the supervisor itself."""

    def __init__(self, python: str, root: Path, args: Sequence[str] = ("-m", "fairpod.executors.forkserver"),
                 env: dict[str, str] | None = None) -> None:
        self.python = python
        self.root = root
        self.args = list(args)
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.broken = os.environ.get(FORKSERVER_ENV, "1") == "0"

    def _start(self) -> bool:
        try:
            with open(self.root / "forkserver.log", "ab") as log:
                self.proc = subprocess.Popen(
                    [self.python, *self.args], stdin=subprocess.PIPE, env=self.env,
                    stdout=subprocess.PIPE, stderr=log, cwd=self.root, start_new_session=True,
                )  # fmt: skip
        except OSError:
            return False
        if self._readline(30.0) != b"ready":
            self._drop()
            return False
        return True

    def _readline(self, timeout: float) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline().strip() if ready else b""

    def spawn(self, rdir: Path, log: Path, *, standby: bool = False) -> Forked | None:
        """A supervisor of ``rdir`` (``standby``: a standby with a spare, :mod:`fairpod.executors.standby`)."""
        for _ in range(2):
            if self.broken:
                return None
            if self.proc is None or self.proc.poll() is not None:
                if not self._start():
                    self.broken = True  # e.g. a python that cannot run it: new interpreters from now on
                    return None
            assert self.proc is not None and self.proc.stdin is not None
            try:
                self.proc.stdin.write(json.dumps({"dir": str(rdir), "log": str(log), "standby": standby}).encode() + b"\n")
                self.proc.stdin.flush()
                answer = self._readline(10.0)
            except OSError:
                answer = b""
            if answer.isdigit():
                return Forked(int(answer))
            self._drop()
        return None

    def _drop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()  # only the fork server: the supervisors it forked are in their own sessions
            self.proc.wait(timeout=10)
            for f in (self.proc.stdin, self.proc.stdout):
                if f is not None:
                    f.close()
        self.proc = None

    def close(self) -> None:
        """Let the fork server go: at the end of its input it exits; its supervisors keep running."""
        if self.proc is not None:
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    if f is not None:
                        f.close()
                except OSError:
                    pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
            self.proc = None
