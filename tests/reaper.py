"""What the tests start is stopped when the run is interrupted (Ctrl-C, SIGTERM), also under pytest-xdist.

The fixtures stop what they started in their teardown. An interrupted run may skip that: SIGTERM ends a pytest
process at once (no teardown runs), a second Ctrl-C cuts a teardown short, and pytest-xdist kills a worker that
does not end soon after the run is interrupted. What those fixtures started runs in sessions of its own (``fairpod
up``, Ray nodes, standby control planes, fork servers, supervisors, replicas), so it is not signalled with the run
and would go on for good. So each test process records here, as it starts them, the processes it starts and the
places where their PIDs are written:

- ``started(pid)``: a process (with its start time, so a reused PID is never taken for it); what is reaped is it,
  every process of the session it leads and every descendant of either;
- ``runs(root)``: a local executor's runs directory, whose ``supervisor.pid`` and ``child.pid`` files name its
  supervisors and replicas (the replicas' process groups are killed, then their cgroups removed);
- ``pidfile(path)``: a file a daemon writes its PID into (``fairpod up`` without ``--foreground``, PostgreSQL's
  ``postmaster.pid``), taken only if that process started after the record was made.

The records are lines of JSON in one file per test process, in a folder of the run (the xdist controller's, handed
to its workers). ``reap`` kills, by those PIDs only, whatever of them still runs, and this process's own
descendants: each test process at its end (after pytest's own teardown, which has then stopped everything in an
uninterrupted run) and the xdist controller last, for all its workers' files, also those of a worker it killed.
Nothing is ever found by its name."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from fairpod.executors import procs, state

_FILE: Path | None = None  # this process's records; None outside a pytest run that set it (e.g. benchmarks)
_OWNER = 0  # the process that records there (a process forked from it reaps nothing at its exit)


def use(folder: Path) -> None:
    """Record this process's starts into ``folder`` (made by the run's first process)."""
    global _FILE, _OWNER
    folder.mkdir(parents=True, exist_ok=True)
    _OWNER = os.getpid()
    _FILE = folder / f"{os.getpid()}.jsonl"


def new_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="fairpod-test-reap-"))


def _record(rec: dict[str, object]) -> None:
    if _FILE is None or os.getpid() != _OWNER:
        return
    with _FILE.open("a") as f:
        f.write(json.dumps(rec) + "\n")


def started(pid: int) -> None:
    """Record a process this test process started (in a session of its own, or not)."""
    _record({"pid": pid, "start": procs.start_time(pid)})


def runs(root: Path) -> None:
    """Record a local executor's runs directory (its supervisors and replicas write their PIDs there)."""
    _record({"runs": str(root)})


def pidfile(path: Path) -> None:
    """Record a file a daemon about to start writes its PID into (the first number in it)."""
    _record({"pidfile": str(path), "after": _now_ticks()})


def _now_ticks() -> int:
    """Now, in /proc's start-time unit (clock ticks since boot)."""
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _table() -> dict[int, tuple[int, int, int]]:
    """pid -> (parent, session, start time) of every live process."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = Path(f"/proc/{name}/stat").read_text(errors="replace")
            except OSError:
                continue
            f = raw[raw.rfind(")") + 2 :].split()
            if f[0] not in ("Z", "X"):
                out[int(name)] = (int(f[1]), int(f[3]), int(f[19]))
    return out


def _records(folder: Path, only: Path | None) -> list[dict[str, object]]:
    out = []
    for f in [only] if only is not None else sorted(folder.glob("*.jsonl")):
        try:
            lines = f.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:  # a line cut short by a killed worker
                continue
    return out


def reap(folder: Path | None = None, *, mine_only: bool = True) -> list[int]:
    """SIGKILL whatever recorded (this process's records, or every file of ``folder``) still runs, with the
    sessions and descendants of the recorded processes, and this process's own descendants; remove the replicas'
    cgroups. Returns the PIDs signalled."""
    if _FILE is None or os.getpid() != _OWNER:
        return []
    recs = _records(folder or _FILE.parent, _FILE if mine_only else None)
    table = _table()
    roots = {os.getpid()} if mine_only else set()
    groups: set[int] = set()  # replicas' process groups
    run_roots: list[Path] = []
    for r in recs:
        if "pid" in r:
            pid = int(r["pid"])  # type: ignore[call-overload]
            if pid in table and (r["start"] is None or table[pid][2] == r["start"]):
                roots.add(pid)
        elif "runs" in r:
            root = Path(str(r["runs"]))
            run_roots.append(root)
            for name in (state.SUPERVISOR_PID, state.CHILD_PID):
                for f in root.glob(f"*/*/*/{name}"):
                    got = state.read_pid(f)
                    if got is not None and got[0] in table and table[got[0]][2] == got[1]:
                        roots.add(got[0])
                        if name == state.CHILD_PID:
                            groups.add(got[0])
        elif "pidfile" in r:
            try:
                pid = int(Path(str(r["pidfile"])).read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            if pid in table and table[pid][2] >= int(r["after"]):  # type: ignore[call-overload]
                roots.add(pid)
    victims = _closure(roots, table) - {os.getpid()}
    if not victims:
        return []
    for g in groups:
        procs.signal_group(g, signal.SIGKILL)
    procs.signal_all(victims, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(procs.start_time(p) is not None for p in victims):
        time.sleep(0.05)
    _discard_groups(run_roots)
    return sorted(victims)


def _closure(roots: set[int], table: dict[int, tuple[int, int, int]]) -> set[int]:
    """``roots``, every process in a session one of them leads, and every descendant of those, to a fixed point."""
    out = set(roots)
    while True:
        more = {p for p, (ppid, sid, _) in table.items() if p not in out and (ppid in out or sid in roots)}
        if not more:
            return out
        out |= more


def _discard_groups(run_roots: list[Path]) -> None:
    for root in run_roots:
        discard_runs(root, best_effort=True)  # the end of an interrupted run: every replica it can


def discard_runs(root: Path, best_effort: bool = False) -> None:
    """Remove the cgroups of every replica under a local executor's runs directory ``root``: the replica's and its
    spares' (fairpod.executors.standby); a supervisor killed with SIGKILL leaves them. ``best_effort``: a replica
    whose cgroups cannot be removed is passed over, not raised."""
    from fairpod import sandbox
    from fairpod.executors import standby

    for rdir in root.glob("*/*/*"):
        if rdir.parent.name.isdigit() and rdir.name.isdigit():
            try:
                for box in standby.boxes(rdir):
                    sandbox.discard(rdir.parent.parent.name, int(rdir.parent.name), int(rdir.name), box)
            except Exception:  # noqa: BLE001 - see best_effort
                if not best_effort:
                    raise


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
