"""Linux process helpers over /proc: identity that survives PID reuse, descendants, killing a whole tree.

A process is named by ``(pid, start_time)``: ``start_time`` is field 22 of ``/proc/<pid>/stat`` (clock ticks
since boot), so a PID reused by another process is never mistaken for the one we started.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Iterable

PR_SET_CHILD_SUBREAPER = 36


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (index 0 is field 3, the state), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return raw[raw.rfind(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """Start time of a live (non-zombie) process, or None if there is none with this PID."""
    st = _stat(pid)
    if st is None or st[0] in ("Z", "X"):
        return None
    return int(st[19])


def alive(pid: int, started: int | None) -> bool:
    """True while the process ``pid`` that started at ``started`` runs (zombies count as dead)."""
    now = start_time(pid)
    return now is not None and (started is None or now == started)


def descendants(root: int) -> list[int]:
    """PIDs of every live descendant of ``root`` (children first), from one walk over /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st is not None and st[0] not in ("Z", "X"):
            children.setdefault(int(st[1]), []).append(int(name))
    out: list[int] = []
    todo = [root]
    while todo:
        kids = children.get(todo.pop(), [])
        out.extend(kids)
        todo.extend(kids)
    return out


def signal_all(pids: Iterable[int], sig: int) -> None:
    """Send ``sig`` to each PID, ignoring those already gone."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop(pid: int, started: int | None, timeout: float) -> bool:
    """SIGTERM to the process ``pid`` that started at ``started``, SIGKILL after ``timeout`` s; True when it ended
    within them (a child of the caller then waits to be reaped)."""
    signal_all([pid], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid, started) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not alive(pid, started):
        return True
    signal_all([pid], signal.SIGKILL)
    return False


def pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to a process group; False if the group is empty or gone."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def become_subreaper() -> bool:
    """Make orphaned descendants of this process re-parent to it (Linux >= 3.4); False if not possible."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
