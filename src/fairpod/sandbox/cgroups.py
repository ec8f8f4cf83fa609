"""A cgroup per replica: limits (CPU quota, memory without extra swap, pids, devices) and what it used.

Two backends, one interface (:class:`Group`):

- **v2** (the unified hierarchy, the default of current distributions): ``cpu.max``, ``memory.max`` with
  ``memory.swap.max = 0``, ``pids.max``; read back from ``cpu.stat`` (``usage_usec``), ``memory.peak`` and
  ``memory.events`` (``oom_kill``). A v2 cgroup with controllers needs a parent whose ``cgroup.subtree_control``
  enables them, and the kernel refuses that on a cgroup that holds processes (the "no internal processes"
  rule), so fairpod's subtree is ``/fairpod`` of the hierarchy when it runs in the root cgroup, and otherwise
  ``$FAIRPOD_CGROUP_ROOT`` (a cgroup delegated to fairpod, e.g. by systemd ``Delegate=yes``).
- **v1** (one hierarchy per controller, as on older hosts and hybrids that bind the controllers to v1):
  ``cpu.cfs_quota_us``/``cpu.cfs_period_us``, ``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes``
  (no swap beyond the limit, when swap accounting is on), ``pids.max``, ``devices.deny``/``devices.allow``;
  read back from ``cpuacct.usage``, ``memory.max_usage_in_bytes`` and ``memory.oom_control`` (``oom_kill``).
  fairpod's subtree is ``fairpod/`` under the supervisor's own cgroup of each controller (which may be nested),
  or ``$FAIRPOD_CGROUP_ROOT`` under each controller's mount.

:func:`detect` picks the backend whose cpu, memory and pids controllers are usable (v2 first), or says why none.
Replica cgroups are named ``<job>.<attempt>.<rank>.<digest of the replica's directory>`` (``sandbox.group_name``:
unique on the host, whichever fairpod made it); the supervisor creates one before the command starts,
moves the command into it from the forked child, and removes it once every process in it has ended.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

NEEDED = ("cpu", "memory", "pids")
CFS_PERIOD_US = 100_000
ROOT_ENV = "FAIRPOD_CGROUP_ROOT"
STALE_AFTER = 600.0


class CgroupError(RuntimeError):
    """A cgroup that cannot be made or used; the message says why, for ``fairpod up`` and the job's reason."""


@dataclass(frozen=True)
class Limits:
    """What one replica may use; None: no limit of that kind."""

    mcpu: int | None = None  # millicores
    memory_bytes: int | None = None
    pids: int | None = None
    devices: tuple[str, ...] | None = None  # v1 device rules to allow (None: no device rule)


@dataclass(frozen=True)
class Usage:
    cpu_seconds: float | None
    memory_peak_bytes: int | None
    oom_kills: int


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _keyed(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        k, _, v = line.partition(" ")
        if k == key and v.strip().lstrip("-").isdigit():
            return int(v)
    return None


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, options) of every cgroup mount of this mount namespace."""
    out = []
    for line in (_read(Path("/proc/self/mountinfo")) or "").splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) >= 6 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
            out.append((fields[4], rest[0], set(fields[5].split(",")) | set(rest[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under ``""`` its v2 path."""
    out: dict[str, str] = {}
    for line in (_read(Path("/proc/self/cgroup")) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for c in parts[1].split(",") if parts[1] else [""]:
                out[c] = parts[2]
    return out


def _rmdir(path: Path) -> None:
    """Remove an emptied cgroup: the kernel may need a moment after the last process was reaped."""
    for _ in range(200):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY:
                return
        time.sleep(0.005)


def _subtree(d: Path) -> list[Path]:
    """``d`` and the cgroups below it (a container engine makes its own inside a replica's), deepest first."""
    out: list[Path] = []
    for top, dirs, _ in os.walk(d, topdown=False, onerror=lambda e: None):
        out += [Path(top) / x for x in dirs]
    return out + [d]


def relative(path: Path) -> str:
    """``path`` (a cgroup directory) as a path inside its cgroup mount, e.g. ``/fairpod/train-1.0.0``."""
    points = [Path(m[0]) for m in _mounts() if path.is_relative_to(m[0])]
    if not points:
        return str(path)
    return "/" + str(path.relative_to(max(points, key=lambda p: len(p.parts))))


def remove_at(rel: str) -> None:
    """Remove ``rel`` (and what is below it) in every v1 controller where it exists and is empty: what a
    container engine made at the same path in controllers whose replica cgroup lies elsewhere."""
    for point, fstype, _ in _mounts():
        d = Path(point) / rel.lstrip("/")
        if fstype == "cgroup" and d.is_dir():
            for x in _subtree(d):
                _rmdir(x)


class Group:
    """One replica's cgroup (its directories, one per v1 controller, or one v2 directory)."""

    kind = ""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs

    def limit(self, lim: Limits) -> None:
        raise NotImplementedError

    def procs_file(self) -> list[Path]:
        """The files a process writes its PID into to join (every controller's, on v1)."""
        return [d / "cgroup.procs" for d in dict.fromkeys(self.dirs.values())]

    def join(self, pid: int = 0) -> None:
        """Move ``pid`` (0: the caller) into the group; safe to call in a forked child before exec."""
        for f in self.procs_file():
            _write(f, str(pid))

    def pids(self) -> list[int]:
        """Every process in the group, also in cgroups below it."""
        out: set[int] = set()
        for d in dict.fromkeys(self.dirs.values()):
            for sub in _subtree(d):
                out.update(int(p) for p in (_read(sub / "cgroup.procs") or "").split() if p.isdigit())
        return sorted(out)

    def usage(self) -> Usage:
        raise NotImplementedError

    def remove(self) -> None:
        for d in dict.fromkeys(self.dirs.values()):
            for sub in _subtree(d):
                _rmdir(sub)


class GroupV1(Group):
    kind = "v1"

    def limit(self, lim: Limits) -> None:
        d = self.dirs
        if lim.mcpu is not None:
            _write(d["cpu"] / "cpu.cfs_period_us", str(CFS_PERIOD_US))
            _write(d["cpu"] / "cpu.cfs_quota_us", str(max(1000, lim.mcpu * CFS_PERIOD_US // 1000)))
        if lim.memory_bytes is not None:
            _write(d["memory"] / "memory.limit_in_bytes", str(lim.memory_bytes))
            if (d["memory"] / "memory.memsw.limit_in_bytes").exists():
                _write(d["memory"] / "memory.memsw.limit_in_bytes", str(lim.memory_bytes))
            else:  # no swap accounting: keep the group's pages out of swap instead
                _write(d["memory"] / "memory.swappiness", "0")
        if lim.pids is not None:
            _write(d["pids"] / "pids.max", str(lim.pids))
        if lim.devices is not None and "devices" in d:
            _write(d["devices"] / "devices.deny", "a")
            for rule in lim.devices:
                _write(d["devices"] / "devices.allow", rule)

    def usage(self) -> Usage:
        d = self.dirs
        cpu = _read(d["cpuacct"] / "cpuacct.usage") if "cpuacct" in d else None
        peak = _read(d["memory"] / "memory.max_usage_in_bytes")
        oom = _keyed(_read(d["memory"] / "memory.oom_control"), "oom_kill")
        return Usage(
            cpu_seconds=int(cpu) / 1e9 if cpu and cpu.strip().isdigit() else None,
            memory_peak_bytes=int(peak) if peak and peak.strip().isdigit() else None,
            oom_kills=oom or 0,
        )


    def watch_oom(self) -> int | None:
        """An eventfd the kernel signals each time the group is out of memory (also when a process in a cgroup
        below it is the one killed, where ``oom_kill`` counts it); None when it cannot be set up."""
        try:
            efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            ofd = os.open(self.dirs["memory"] / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)
            try:
                _write(self.dirs["memory"] / "cgroup.event_control", f"{efd} {ofd}")
            finally:
                os.close(ofd)
        except (OSError, KeyError):
            return None
        return efd


def oom_events(efd: int | None) -> int:
    """How many times the group of :meth:`GroupV1.watch_oom` was out of memory (the eventfd is closed)."""
    if efd is None:
        return 0
    try:
        return os.eventfd_read(efd)
    except OSError:  # BlockingIOError: none
        return 0
    finally:
        os.close(efd)


class GroupV2(Group):
    kind = "v2"

    def limit(self, lim: Limits) -> None:
        d = self.dirs[""]
        if lim.mcpu is not None:
            _write(d / "cpu.max", f"{max(1000, lim.mcpu * CFS_PERIOD_US // 1000)} {CFS_PERIOD_US}")
        if lim.memory_bytes is not None:
            _write(d / "memory.max", str(lim.memory_bytes))
            if (d / "memory.swap.max").exists():
                _write(d / "memory.swap.max", "0")
        if lim.pids is not None:
            _write(d / "pids.max", str(lim.pids))

    def usage(self) -> Usage:
        d = self.dirs[""]
        usec = _keyed(_read(d / "cpu.stat"), "usage_usec")
        peak = _read(d / "memory.peak")
        return Usage(
            cpu_seconds=usec / 1e6 if usec is not None else None,
            memory_peak_bytes=int(peak) if peak and peak.strip().isdigit() else None,
            oom_kills=_keyed(_read(d / "memory.events"), "oom_kill") or 0,
        )

    def remove(self) -> None:
        kill = self.dirs[""] / "cgroup.kill"
        if kill.exists() and self.pids():
            try:
                _write(kill, "1")
            except OSError:
                pass
        super().remove()


@dataclass(frozen=True)
class Hierarchy:
    """Where fairpod makes replica cgroups: ``bases`` maps a controller (``""`` on v2) to fairpod's subtree."""

    kind: str  # "v1" or "v2"
    bases: dict[str, Path]
    controllers: frozenset[str]

    def group(self, name: str) -> Group:
        dirs = {c: b / name for c, b in self.bases.items()}
        return GroupV2(dirs) if self.kind == "v2" else GroupV1(dirs)

    def discard(self, name: str) -> None:
        """Kill what is left in the cgroup ``name`` and remove it (its supervisor died without doing so)."""
        g = self.group(name)
        for _ in range(100):
            pids = g.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
        g.remove()

    def prune(self, older_than: float = STALE_AFTER) -> None:
        """Remove empty replica cgroups older than ``older_than`` seconds: left by supervisors killed with
        SIGKILL (a live supervisor removes its own as soon as its replica has ended). Their age is on the kernel's
        clock (:func:`kernel_now`), as their mtime is: a supervisor whose own clock ran an hour ahead took every
        group just made, whose replica had not entered it yet, for an old one and removed it, and that replica
        failed to start (``Exception occurred in preexec_fn``)."""
        first = next(iter(self.bases.values()))
        now = kernel_now()
        try:
            entries = [d for d in first.iterdir() if d.is_dir() and d.name.count(".") >= 2]
        except OSError:
            return
        for d in entries:
            try:
                old = now - d.stat().st_mtime > older_than
            except OSError:
                continue
            g = self.group(d.name)
            if old and not g.pids():
                g.remove()

    def create(self, name: str, lim: Limits) -> Group:
        """The cgroup ``name`` with ``lim``: made, or an old one of that name (left by a crash) reused as it is,
        with any process still in it, its limits set again (a caller that needs it empty names it afresh)."""
        self.prune()
        group = self.group(name)
        dirs = group.dirs
        try:
            for d in dict.fromkeys(dirs.values()):
                d.mkdir(parents=True, exist_ok=True)
            group.limit(lim)
        except OSError as e:
            group.remove()
            raise CgroupError(f"cannot set up cgroup {name} ({self.kind}): {e.strerror or e}") from None
        return group


def kernel_now() -> float:
    """The kernel's wall-clock time now, the clock of a cgroup directory's mtime: the boot time and the time since
    it, read from /proc, not this process's ``time.time()``, which libfaketime or a clock of its own may move
    (within a second: ``btime`` is whole seconds)."""
    try:
        stat = Path("/proc/stat").read_text()
        btime = int(next(ln.split()[1] for ln in stat.splitlines() if ln.startswith("btime ")))
        return btime + float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, StopIteration, ValueError, IndexError):
        return time.time()


def _v2(mount: str, own: str) -> Hierarchy:
    root = os.environ.get(ROOT_ENV)
    base = Path(mount) / (root or ("fairpod" if own == "/" else own)).lstrip("/")
    if not root and own != "/":
        raise CgroupError(
            f"cgroup v2: fairpod runs in {own}, which holds processes; set {ROOT_ENV} to a cgroup delegated "
            "to fairpod (systemd Delegate=yes)"
        )
    parent = Path(mount)
    have = set((_read(parent / "cgroup.controllers") or "").split())
    if not set(NEEDED) <= have:
        raise CgroupError(f"cgroup v2 at {mount} has controllers {sorted(have) or 'none'}, not {'/'.join(NEEDED)}")
    try:
        for part in base.relative_to(parent).parts:  # enable the controllers down to fairpod's subtree
            sub = " ".join(f"+{c}" for c in NEEDED)
            _write(parent / "cgroup.subtree_control", sub)
            parent = parent / part
            parent.mkdir(exist_ok=True)
        _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in NEEDED))
    except OSError as e:
        raise CgroupError(f"cgroup v2: cannot enable {'/'.join(NEEDED)} under {parent}: {e.strerror or e}") from None
    return Hierarchy("v2", {"": base}, frozenset(NEEDED))


def _v1(mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> Hierarchy:
    root = os.environ.get(ROOT_ENV)
    bases: dict[str, Path] = {}
    for want in (*NEEDED, "cpuacct", "devices"):
        for point, fstype, opts in mounts:
            if fstype == "cgroup" and want in opts:
                rel = root or f"{own.get(want, '/')}/fairpod"
                bases[want] = Path(point) / rel.lstrip("/")
                break
    missing = [c for c in NEEDED if c not in bases]
    if missing:
        raise CgroupError(f"cgroup v1: no {'/'.join(missing)} controller mounted")
    for b in bases.values():
        try:
            b.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CgroupError(f"cgroup v1: cannot create {b}: {e.strerror or e}") from None
    if "memory" in bases:  # v1 counts children only with use_hierarchy (always on in new kernels)
        uh = bases["memory"] / "memory.use_hierarchy"
        if (_read(uh) or "1").strip() == "0":
            try:
                _write(uh, "1")
            except OSError:
                pass
    return Hierarchy("v1", bases, frozenset(bases))


def detect() -> Hierarchy:
    """The hierarchy fairpod can limit replicas in (v2 when its controllers are there, else v1); raises
    :class:`CgroupError` with the reason when neither works."""
    mounts, own = _mounts(), _own_paths()
    why: list[str] = []
    v2 = [m for m in mounts if m[1] == "cgroup2"]
    if v2:
        try:
            return _v2(v2[0][0], own.get("", "/"))
        except CgroupError as e:
            why.append(str(e))
    if any(m[1] == "cgroup" for m in mounts):
        try:
            return _v1(mounts, own)
        except CgroupError as e:
            why.append(str(e))
    raise CgroupError("; ".join(why) or "no cgroup filesystem mounted")


def v2_at(base: Path) -> Hierarchy:
    """A v2 hierarchy rooted at ``base`` as it is (no controller enabled): for tests against a cgroup2 mount."""
    have = frozenset((_read(base / "cgroup.subtree_control") or "").split())
    return Hierarchy("v2", {"": base}, have)
