"""Fork server of replica supervisors: ``python -m fairpod.executors.forkserver``.

Starting a supervisor as a new Python process costs tens of milliseconds of CPU (interpreter start-up and
imports); forking one from a process that has already loaded :mod:`fairpod.executors.supervisor` costs a
few. The local executor starts this server once (in its own session) and asks it for each supervisor.

Protocol, one line each way per supervisor, on the server's stdin and stdout: the request is JSON
``{"dir": replica_dir, "log": supervisor_log}`` (with ``"standby": true``: a standby supervisor holding a spare of the
replica, :mod:`fairpod.executors.standby`); the answer is the new supervisor's PID, or ``error <text>``.
The server first writes ``ready``. It exits at the end of its input (when the executor closes the pipe or its
process ends). A forked supervisor is exactly what ``python -m fairpod.executors.supervisor DIR`` would be:
a new session, working directory ``DIR``, stdin from /dev/null, stdout and stderr appended to the log; it
outlives the fork server and the control plane. The server ignores SIGCHLD, so its children never linger
as zombies; the executor watches them through their PID files and /proc.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from collections.abc import Callable

from fairpod.executors import standby, supervisor
from fairpod.sandbox import namespaces


def _child(req: dict, target: Callable[[list[str]], int]) -> None:
    """In the forked child: become the supervisor of ``req['dir']``; never returns."""
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the supervisor waits for its command
        os.setsid()
        os.chdir(req["dir"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        code = target([req["dir"]])
    except BaseException:  # noqa: BLE001 - report anything, then leave without running the parent's code
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main(target: Callable[[list[str]], int] = supervisor.main) -> int:
    """Serve requests; each child runs ``target([dir])`` (the supervisor's ``main``, or another one's)."""
    namespaces.supported()  # probed once here (a fork), inherited by every supervisor forked from us
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # exited supervisors are reaped by the kernel
    rfile, wfile = sys.stdin.buffer, sys.stdout.buffer
    wfile.write(b"ready\n")
    wfile.flush()
    for line in rfile:  # ends at EOF
        try:
            req = json.loads(line)
            if not isinstance(req, dict) or not isinstance(req.get("dir"), str) or not isinstance(req.get("log"), str):
                raise ValueError("want {dir, log}")
            pid = os.fork()
        except (OSError, ValueError) as e:
            wfile.write(f"error {e}\n".encode())
            wfile.flush()
            continue
        if pid == 0:
            _child(req, standby.main if req.get("standby") is True else target)
        wfile.write(f"{pid}\n".encode())
        wfile.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
