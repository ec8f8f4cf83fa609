"""A replica's standby supervisor, holding a spare of its process for recovery from peers (issue 49).

A replica started again after a failure pays for a new interpreter and its imports (``import torch``: ~2 s of CPU)
before it can join its peers. For a job with ``peer_recovery`` the local executor forks, beside each replica's
supervisor, a standby (``{"standby": true}`` to the fork server; :func:`main`) that makes the replica's sandbox as
the supervisor would (:class:`fairpod.executors.supervisor.Supervisor`: a cgroup with the replica's limits, its
mount and PID namespaces, its user, its working directory and environment) and starts in it the job's own
interpreter running :mod:`fairpod.executors.spare_program`: the spare imports torch at low priority and waits.

When the replica's process fails and the control plane restarts it in place, the executor writes the new
``launch.json`` and ``standby.go`` (the standby's PID) and sends it SIGUSR1 (:mod:`fairpod.executors.spares`) instead of forking a supervisor:
the standby checks that the launch is the one it prepared for (same command, user, workdir, limits...), writes the
replica's ``supervisor.pid``, gives the spare its priority back and the launch's command and environment, and from
then on is the replica's supervisor, the spare its process (``child.pid``; its cgroup the replica's). A launch it
did not prepare for, or a spare that ended, is started afresh by the same process, as a supervisor would.

A standby that is not used ends by itself, its spare and cgroup with it, on SIGTERM (the executor stopped that
rank) or once every replica of its attempt has ended (the job finished or restarted whole); it never writes the
replica's ``status.json``. Only a host command ``python script.py ...`` or ``python -m module ...`` (no other
interpreter option) gets a spare; a container or a service does not.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from fairpod.executors import procs, spare_program, state, supervisor

GO = signal.SIGUSR1
LOG = "standby.log"  # the standby's own output, in the replica's directory
GO_FILE = "standby.go"  # the PID of the standby that takes the new launch over
# what a launch must share with the one the spare was prepared for (the env differs: restart counts, generation)
SAME = ("job", "team", "attempt", "rank", "world_size", "node", "command", "workdir", "run_as", "umask", "limits",
        "container", "readiness", "mounts_allow", "named_workdir")
PYTHON = re.compile(r"python[0-9.]*")


def box_of(rdir: Path, restarts: int) -> Path:
    """What the cgroup of the spare made for the replica's launch after ``restarts`` restarts in place is named
    after (fairpod.sandbox.group_name): beside the replica's own, and beside the one that took the last launch over."""
    return rdir / f"spare{restarts}"


def restarts_of(spec: dict[str, Any]) -> int:
    try:
        return int((spec.get("env") or {}).get("FAIRPOD_REPLICA_RESTARTS") or 0)
    except ValueError:
        return 0


def boxes(rdir: Path) -> list[Path]:
    """The directories the cgroups of the replica of ``rdir`` are named after: its own, the spare that took its
    launch over and the one made for its next."""
    n = restarts_of(state.read_launch(rdir, secret=False) or {})
    return [rdir, *(box_of(rdir, k) for k in (n - 1, n) if k >= 0)]


class Ended(Exception):
    """The standby is not wanted any more: its spare and cgroup go, and it exits."""


def unfit(spec: dict[str, Any]) -> str | None:
    """Why the replica of ``spec`` gets no spare, or None."""
    cmd = [str(a) for a in spec.get("command") or ()]
    if not spec.get("spare"):
        return "its job does not recover from peers"
    if spec.get("container") or spec.get("readiness"):
        return "a container or a service"
    if len(cmd) < 2 or not PYTHON.fullmatch(Path(cmd[0]).name):
        return "its command is not a Python interpreter running a program"
    if cmd[1].startswith("-") and (cmd[1] != "-m" or len(cmd) < 3):
        return f"its interpreter has options ({cmd[1]}): only 'python script.py' and 'python -m module' are taken"
    return None


class Standby(supervisor.Supervisor):
    standing_by = True

    def __init__(self, rdir: Path) -> None:
        super().__init__(rdir)
        self.box_dir = box_of(rdir, restarts_of(self.spec))
        self.go = False
        self.took_over = False
        self.held: list[str] = []
        signal.signal(GO, self._on_go)

    def _on_go(self, signum: int, frame: object) -> None:
        self.go = True

    def note(self, text: str) -> None:
        if self.took_over:
            super().note(text)
        elif not text.startswith("job "):  # the header is the replacement's, written when it takes over
            self.held.append(text)

    def _attempt_over(self) -> bool:
        """Every replica of the attempt has ended (the job finished, or restarts whole in a new attempt), or its
        supervisor is gone (killed: no status to wait for). A replica being started again has neither."""

        def ended(d: Path) -> bool:
            sup = state.read_pid(d / state.SUPERVISOR_PID)
            return (d / state.STATUS).exists() or (sup is not None and not procs.alive(*sup))

        return all(ended(d) for d in self.dir.parent.iterdir() if d.name.isdigit())

    def called(self) -> bool:
        """The executor handed this standby the replica's new launch: SIGUSR1, or its PID in ``standby.go``
        (written first: a signal that came before the handler was set is not lost)."""
        with contextlib.suppress(OSError):
            self.go = self.go or (self.dir / GO_FILE).read_text().strip() == str(os.getpid())
        return self.go

    def _popen(self, cmd: list[str], cwd: str | None, env: dict[str, str], enter: Any) -> subprocess.Popen[bytes]:
        """Start the spare in the replica's sandbox, wait for the replica's new launch, hand it to the spare."""
        spare = subprocess.Popen(
            [cmd[0], "-c", Path(spare_program.__file__).read_text()], cwd=cwd or None,
            env={**env, "FAIRPOD_SPARE_NICE": "10" if os.geteuid() == 0 else "0"}, preexec_fn=enter,
            stdin=subprocess.PIPE, stdout=self.out.w, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        self.child, started = spare, time.time()
        while not self.called():
            if self.signals:
                raise Ended("stopped")
            if self._attempt_over():
                raise Ended("every replica of its attempt has ended")
            select.select([self.wake, *self.out.fds()], [], [], 1.0)
            self.out.pump()
            with contextlib.suppress(BlockingIOError):
                while os.read(self.wake, 512):
                    pass
        new = state.read_launch(self.dir)
        if new is None or spare.poll() is not None:
            raise RuntimeError("the spare has ended" if new is not None else f"no readable {state.LAUNCH}")
        if differs := [k for k in SAME if new.get(k) != self.spec.get(k)]:
            raise RuntimeError(f"the new launch differs from the spare's in {', '.join(differs)}")
        old_env, new_env = self.spec.get("env") or {}, new.get("env") or {}
        run_env = {k: v for k, v in env.items() if k not in old_env or k in new_env} | new_env
        self._renice(spare.pid)
        assert spare.stdin is not None
        spare.stdin.write(json.dumps({"argv": cmd, "env": run_env}).encode() + b"\n")
        spare.stdin.close()
        self.spec, self.grace, self.started_at = new, float(new.get("grace_seconds", 30.0)), time.time()
        state.write_pid(self.dir / state.SUPERVISOR_PID, os.getpid(), procs.start_time(os.getpid()))
        self.took_over = True
        (self.dir / GO_FILE).unlink(missing_ok=True)
        s = new
        self.note(f"job {s.get('job')} (team {s.get('team')}) attempt {s.get('attempt')} replica {s.get('rank')}/"
                  f"{s.get('world_size')} on node {s.get('node')} started {supervisor._now()} in its spare (started "
                  f"{time.strftime('%H:%M:%S', time.gmtime(started))}, its imports done): {shlex.join(cmd)}")
        for text in self.held:
            self.note(text)
        return spare

    def _renice(self, pid: int) -> None:
        """The spare's threads (and its namespace's processes) back to this supervisor's priority."""
        prio = os.getpriority(os.PRIO_PROCESS, 0)
        pids = {pid, *procs.descendants(os.getpid()), *(self.sandbox.pids() if self.sandbox is not None else ())}
        for p in pids:
            with contextlib.suppress(OSError):
                for tid in os.listdir(f"/proc/{p}/task"):
                    with contextlib.suppress(OSError):
                        os.setpriority(os.PRIO_PROCESS, int(tid), prio)

    def drop(self) -> None:
        """The spare, what it started and its cgroup go (never the replica's status)."""
        if self.child is not None:
            self.abort()
        if self.sandbox is not None:
            self.sandbox.finish({})
        self.out.close()
        self.log.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m fairpod.executors.standby REPLICA_DIR", file=sys.stderr)
        return 2
    rdir = Path(args[0])
    spec = state.read_launch(rdir, secret=False)  # the replica's credentials are its supervisor's
    why = f"no readable {state.LAUNCH}" if spec is None else unfit(spec)
    if why is not None:
        print(f"fairpod standby: no spare for {rdir}: {why}", flush=True)
        return 0
    sb = Standby(rdir)
    result: dict[str, Any] = {}
    try:
        result = sb.run()
    except Ended as e:
        print(f"fairpod standby: {e}; the spare ends", flush=True)
    except Exception as e:  # noqa: BLE001 - before the takeover: the launch is started afresh below
        traceback.print_exc()
        if sb.took_over:
            sb.abort()
            result = {"returncode": None, "signal": None, "reason": f"supervisor error: {e}"}
    if sb.took_over:
        sb.finish(result)
        return 0
    sb.drop()
    if sb.called():  # the replica's new launch is this process's to run: as a supervisor would
        print("fairpod standby: starting the replica afresh", flush=True)
        return supervisor.main([str(rdir)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
