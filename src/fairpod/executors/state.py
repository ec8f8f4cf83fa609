"""On-disk layout of the local executor, shared by the executor and the supervisor.

``<root>/<job>/<attempt>/<rank>/`` holds one replica run:

- ``launch.json``    what to run (command, env, workdir, grace, header), written before the supervisor starts;
                     it holds no credential: the job token goes to ``secret.json``, which the supervisor reads
                     and deletes before it starts the command
- ``supervisor.pid`` ``"<pid> <start_time>"``, written by the supervisor once its signal handlers are set
- ``child.pid``      ``"<pid> <start_time>"`` of the command, which is also its process group id
- ``stop.json``      a stop request: ``{"grace_seconds": g, "requested_at": t}``
- ``status.json``    the exit: ``{"returncode", "signal", "reason", "started_at", "ended_at"}``
- ``reported``       marker: ``poll``/``adopt`` has returned this exit
- ``ready.json``     a service replica's last readiness probe ``{"ready", "detail", "at"}`` (readycheck)
- ``output.log``     stdout and stderr of the command; every run appends after a ``==== fairpod:`` header
- ``supervisor.log`` the supervisor's own stderr (empty unless it crashed)

Every JSON and PID file is written to a temporary name and renamed, so a reader sees all of it or nothing
(no fsync: the files must survive a crash of a process, not of the machine, which ends the replicas too).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fairpod import sandbox
from fairpod.executors.base import JOB_NAME_RE, ExecutorError, ReplicaExit
from fairpod.executors.logs import follow_log

NAME_RE = JOB_NAME_RE  # a job name safe as a directory name (fairpod.executors.base)

LAUNCH = "launch.json"
SECRET = "secret.json"
SECRET_ENV = ("FAIRPOD_TOKEN",)  # variables of a replica's env that never rest in launch.json
SUPERVISOR_PID = "supervisor.pid"
CHILD_PID = "child.pid"
STOP = "stop.json"
STATUS = "status.json"
REPORTED = "reported"
READY = "ready.json"
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


def write_launch(rdir: Path, spec: dict[str, Any]) -> None:
    """Write ``launch.json``, with the credentials of its ``env`` split off into ``secret.json`` (0600)."""
    env = dict(spec.get("env", {}))
    secret = {k: env.pop(k) for k in SECRET_ENV if k in env}
    if secret:
        write_json(rdir / SECRET, secret)
        os.chmod(rdir / SECRET, 0o600)
    write_json(rdir / LAUNCH, {**spec, "env": env})


def read_launch(rdir: Path, *, secret: bool = True) -> dict[str, Any] | None:
    """``launch.json`` with its credentials put back from ``secret.json``, which is deleted (read once): by the one
    process that runs the launch (the replica's supervisor, or the standby whose spare takes a new launch over).
    ``secret=False``: the launch without its credentials, ``secret.json`` left for that process (every other
    reader: a standby starting beside the supervisor, the executor looking for a replica's cgroups, an agent
    sorting its leftovers; one of them taking it first left the replica without its ``FAIRPOD_TOKEN``)."""
    spec = read_json(rdir / LAUNCH)
    if spec is None or not secret:
        return spec
    creds = read_json(rdir / SECRET) or {}
    (rdir / SECRET).unlink(missing_ok=True)
    spec["env"] = {**spec.get("env", {}), **{k: str(v) for k, v in creds.items() if k in SECRET_ENV}}
    return spec


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


def log_path(root: Path, job: str, replica: int = 0, attempt: int | None = None) -> Path | None:
    """The output log of a replica under ``root`` (of its latest attempt by default), None if there is none."""
    jdir = root / job
    if not NAME_RE.fullmatch(job) or not jdir.is_dir():
        return None
    if attempt is None:
        tried = [int(a.name) for a in jdir.iterdir() if a.name.isdigit() and (a / str(replica)).is_dir()]
        if not tried:
            return None
        attempt = max(tried)
    rdir = jdir / str(attempt) / str(replica)
    return rdir / OUTPUT if rdir.is_dir() else None


def follow(root: Path, job: str, replica: int, attempt: int | None, poll_interval: float) -> Iterator[str]:
    """Text of a replica's log as it is written, until that replica has ended (``get-logs --follow``)."""
    path = log_path(root, job, replica, attempt)
    if path is None:
        raise ExecutorError(f"no logs for job {job} replica {replica}")
    return follow_log(path, stop=(path.parent / STATUS).exists, poll_interval=poll_interval)


def exit_of(job: str, attempt: int, rank: int, st: dict[str, Any]) -> ReplicaExit:
    """The exit that a replica's ``status.json`` records (``"started": false``: its command never started)."""
    return ReplicaExit(job=job, attempt=attempt, rank=rank, returncode=st.get("returncode"), signal=st.get("signal"),
                       reason=str(st.get("reason", "")), ended_at=float(st.get("ended_at", 0.0)),
                       started=st.get("started") is not False, **sandbox.usage_of(st))
