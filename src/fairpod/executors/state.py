"""On-disk layout of the local executor, shared by the executor and the supervisor.

``<root>/<job>/<attempt>/<rank>/`` holds one replica run:

- ``launch.json``    what to run (command, env, workdir, grace, header), written before the supervisor starts
- ``supervisor.pid`` ``"<pid> <start_time>"``, written by the supervisor once its signal handlers are set
- ``child.pid``      ``"<pid> <start_time>"`` of the command, which is also its process group id
- ``stop.json``      a stop request: ``{"grace_seconds": g, "requested_at": t}``
- ``status.json``    the exit: ``{"returncode", "signal", "reason", "started_at", "ended_at"}``
- ``reported``       marker: ``poll``/``adopt`` has returned this exit
- ``output.log``     stdout and stderr of the command; every run appends after a ``==== fairpod:`` header
- ``supervisor.log`` the supervisor's own stderr (empty unless it crashed)

Every JSON and PID file is written to a temporary name and renamed, so a reader sees all of it or nothing
(no fsync: the files must survive a crash of a process, not of the machine, which ends the replicas too).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

LAUNCH = "launch.json"
SUPERVISOR_PID = "supervisor.pid"
CHILD_PID = "child.pid"
STOP = "stop.json"
STATUS = "status.json"
REPORTED = "reported"
OUTPUT = "output.log"
SUPERVISOR_LOG = "supervisor.log"


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_pid(path: Path, pid: int, started: int | None) -> None:
    write_atomic(path, f"{pid} {started if started is not None else -1}\n")


def read_pid(path: Path) -> tuple[int, int | None] | None:
    """``(pid, start_time)`` from a PID file, or None if it is missing or unreadable."""
    try:
        parts = path.read_text(encoding="ascii").split()
        pid, started = int(parts[0]), int(parts[1])
    except (FileNotFoundError, ValueError, IndexError):
        return None
    return pid, (started if started >= 0 else None)
