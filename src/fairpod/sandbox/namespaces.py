"""A replica's own view of the machine: mount and PID namespaces (a user namespace too when fairpod is not root).

Set up in the forked child of the supervisor, before exec (:func:`enter`), with ``unshare(2)`` and ``mount(2)``:

1. ``unshare(CLONE_NEWNS | CLONE_NEWPID)``, and ``CLONE_NEWUSER`` first when fairpod is not root (its own uid
   and gid mapped to themselves: the command keeps fairpod's uid and loses every capability at exec);
2. the child forks the namespace's init (PID 1), which reaps and hands the command's exit status back; the
   command itself is PID 2, so SIGTERM to its process group reaches it as on the host (a namespace's init
   would ignore it);
3. in the new mount namespace (all mounts private): an empty ``tmpfs`` on ``/tmp`` (private to the job); an
   empty, read-only ``tmpfs`` over each hidden directory (fairpod's state directory, the runs directory of every
   job, the checkpoint root of every team, the CLI config's directory) and ``/dev/null`` over each hidden file;
   the replica's own checkpoint directory and working directory bound back at their paths; a new ``/proc``
   that shows the processes of this namespace only;
4. for a replica run as another user: where fairpod's interpreter or the job's program lies under a directory that
   user cannot traverse, that directory covered by an empty ``tmpfs`` with only the way to them bound back,
   read-only (:mod:`fairpod.sandbox.reach`, which makes the plan; made first, so the steps above apply on top);
   what of it lies under the host's ``/tmp`` bound back, read-only, into the private one;
5. with a device plan (:func:`fairpod.sandbox.devices.plan`), a private ``/dev``: a fresh ``tmpfs`` (no device
   node made in it can be opened) with only the planned device files bound back from the host, so a replica
   opens no GPU but its own, also on a cgroup v2 host.

Mounts made in a user namespace are locked for the namespaces below it, and a replica without capabilities can
unmount nothing, so what is hidden stays hidden.
"""

from __future__ import annotations

import ctypes
import os
import signal
import stat
import struct
from dataclasses import dataclass, field
from functools import cache

from fairpod.sandbox.devices import Dev
from fairpod.sandbox.reach import Op, inside

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT)

_libc = ctypes.CDLL(None, use_errno=True)


class NamespaceError(OSError):
    pass


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise NamespaceError(e, f"{what}: {os.strerror(e)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if x is None else x.encode() for x in (source, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


@dataclass(frozen=True)
class View:
    """What a replica sees of the file system: paths hidden (directories or files), paths it keeps."""

    hide: tuple[str, ...]
    keep: tuple[str, ...]
    tmp: bool = True  # a private /tmp
    user_ns: bool = False  # not root: a user namespace makes the rest possible
    uid: int = field(default_factory=os.getuid)
    gid: int = field(default_factory=os.getgid)
    reach: tuple[Op, ...] = ()  # mounts that let the replica's user reach its interpreter (fairpod.sandbox.reach)
    from_tmp: tuple[Op, ...] = ()  # what of its interpreter and program lies under the host's /tmp (reach.from_tmp)
    dev: tuple[Dev, ...] | None = None  # a private /dev (fairpod.sandbox.devices.plan); None: the host's


_inside = inside


def _reach(ops: tuple[Op, ...]) -> tuple[list[str], list[str]]:
    """Cover each directory of ``ops`` with an empty tmpfs and bring back, read-only, what the replica's user must
    reach under it (staged before the first cover hides it); the covers and the paths brought back."""
    staged = _stage(ops)
    covers: list[str] = []
    back: list[str] = []
    try:
        for op in ops:
            if op.kind == "cover":
                mount("tmpfs", op.path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=64k")
                covers.append(op.path)
            elif _place(op, staged):
                back.append(op.path)
    finally:
        for fd in staged.values():
            os.close(fd)
    return covers, back


def _stage(ops: tuple[Op, ...]) -> dict[str, int]:
    """An ``O_PATH`` descriptor of each path to bind back, taken before a cover hides it."""
    staged: dict[str, int] = {}
    for op in ops:
        if op.kind in ("dir", "file"):
            try:
                staged[op.path] = os.open(op.path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                pass
    return staged


def _place(op: Op, staged: dict[str, int]) -> bool:
    """Make a ``link`` op's symbolic link again, or bind a staged ``dir``/``file`` back at its path, read-only
    (keeping its mount's nosuid/nodev/noexec); True when something was bound."""
    if op.kind == "link":
        os.symlink(op.target, op.path)
        return False
    if op.path not in staged:
        return False
    if op.kind == "dir":
        os.mkdir(op.path, 0o755)
    else:
        os.close(os.open(op.path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o444))
    mount(f"/proc/self/fd/{staged[op.path]}", op.path, None, MS_BIND | MS_REC)
    keep = os.statvfs(op.path).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount(None, op.path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)
    return True


def _bring_back(ops: tuple[Op, ...], staged: dict[str, int]) -> list[str]:
    """``ops`` (``reach.from_tmp``), staged before ``/tmp`` was covered, placed at their own paths in the
    replica's new ``/tmp``: the way down made of directories the replica's user may traverse."""
    back = []
    mask = os.umask(0o022)
    try:
        for op in ops:
            os.makedirs(os.path.dirname(op.path), exist_ok=True)
            if _place(op, staged):
                back.append(op.path)
    finally:
        os.umask(mask)
        for fd in staged.values():
            os.close(fd)
    return back


def _stage_dev(ops: tuple[Dev, ...]) -> dict[str, int]:
    """An ``O_PATH`` descriptor of each host file of the plan, taken before anything covers them."""
    staged: dict[str, int] = {}
    for d in ops:
        if d.kind == "bind":
            try:
                staged[d.name] = os.open(d.source, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                pass
    return staged


def _private_dev(ops: tuple[Dev, ...], staged: dict[str, int]) -> None:
    """A fresh tmpfs on /dev with only the planned entries; read-only once made."""
    try:
        mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=64k")
        for d in ops:
            path = f"/dev/{d.name}"
            if d.kind == "dir":
                os.mkdir(path, 0o755)
            elif d.kind == "link":
                os.symlink(d.source, path)
            elif d.kind == "tmpfs":
                os.mkdir(path, 0o1777)
                mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
            elif d.kind == "devpts":
                os.mkdir(path, 0o755)
                mount("devpts", path, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
            elif d.name in staged:
                fd = staged[d.name]
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    os.mkdir(path, 0o755)
                else:
                    os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
                mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        mount(None, "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    finally:
        for fd in staged.values():
            os.close(fd)


def _same(path: str, fd: int) -> bool:
    """Is ``path`` (as this mount namespace shows it now) the directory ``fd`` was opened on?"""
    try:
        a, b = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _mount_view(v: View) -> None:
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    staged_dev = _stage_dev(v.dev) if v.dev is not None else {}
    keep = {}
    for p in v.keep:
        try:
            keep[p] = os.open(p, os.O_PATH | os.O_DIRECTORY)
        except OSError as e:  # said in the replica's log (its stderr)
            os.write(2, f"fairpod: {p} is not bound into the replica's view: {e.strerror or e}\n".encode())
    covers, back = _reach(v.reach)
    if v.tmp:
        staged = _stage(v.from_tmp)
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        back += _bring_back(v.from_tmp, staged)
    for p in sorted(v.hide, key=len):  # a parent first: what is under it is gone with it
        if any(_inside(p, h) for h in v.hide if h != p and len(h) < len(p)) or (
                v.tmp and _inside(p, "/tmp") and not any(_inside(p, b.path) for b in v.from_tmp)):
            continue
        try:
            st = os.stat(p)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=64k")
        else:
            mount("/dev/null", p, None, MS_BIND)
    for p, fd in sorted(keep.items()):  # bring back what was under a hidden path
        # (not the read-only copy, nor the skeleton of directories made on the way down to what was brought back
        # into the private /tmp: a checkout under /tmp whose program lies inside its workdir)
        if not os.path.exists(p) or any(_inside(p, b) for b in back) or not _same(p, fd):
            mask = os.umask(0o022)  # the way down is traversable by the replica's user; what is bound is its own
            try:
                os.makedirs(p, exist_ok=True)
            finally:
                os.umask(mask)
            mount(f"/proc/self/fd/{fd}", p, None, MS_BIND | MS_REC)
        os.close(fd)
    for p in v.hide:  # the masks themselves are read-only (their mount points made above stay)
        if os.path.isdir(p) and not (v.tmp and _inside(p, "/tmp")):
            try:
                mount(None, p, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
            except OSError:
                pass
    for p in covers:
        mount(None, p, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    if v.dev is not None:
        _private_dev(v.dev, staged_dev)


def _map_ids(v: View) -> None:
    # a process that changed its ids (e.g. started by root with runuser) is not dumpable, and then its own
    # /proc/self/*_map files belong to root: this fairpod process may write them as its own
    _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{v.uid} {v.uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{v.gid} {v.gid} 1")


def _close_other_fds(keep: int) -> None:
    """The namespace's init and its parent hold no descriptor of the supervisor's (so the supervisor sees the
    command's exec at once), only their stdio and ``keep``."""
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 16)


def _ignore_stops() -> None:
    """The processes around the command ignore stop signals: the supervisor signals the command's process group
    (and each descendant outside it), which reaches the command itself, once."""
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)


def _init(job: int, report: int) -> None:
    """PID 1 of the replica's namespace: reap, and report the command's status."""
    _ignore_stops()
    status = signal.SIGKILL & 0x7F
    while True:
        try:
            pid, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if pid == job:
            status = st
            break  # the namespace ends with its init: whatever the command left is killed by the kernel
    try:
        os.write(report, struct.pack("i", status))
    finally:
        os._exit(0)


def _outer(init: int, report: int) -> None:
    """The supervisor's child, outside the namespace: wait for its init, then end as the command ended."""
    _ignore_stops()
    while True:
        try:
            os.waitpid(init, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            break
    data = os.read(report, 4)
    st = struct.unpack("i", data)[0] if len(data) == 4 else (signal.SIGKILL & 0x7F)
    if os.WIFSIGNALED(st):
        sig = os.WTERMSIG(st)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128)


def enter(v: View) -> None:
    """In the supervisor's forked child, before exec: returns in the process that becomes the command (PID 2 of
    a new PID namespace, in its own mount namespace); the processes around it never return. A failure is said on
    the replica's stderr (its log) and raised."""
    try:
        _enter(v)
    except OSError as e:
        os.write(2, f"fairpod: cannot set up the replica's namespaces: {e}\n".encode())
        raise


def _enter(v: View) -> None:
    signal.set_wakeup_fd(-1)  # the supervisor's: not theirs
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if v.user_ns:
        unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID)
        _map_ids(v)
    else:
        unshare(CLONE_NEWNS | CLONE_NEWPID)
    r, w = os.pipe()
    init = os.fork()
    if init:
        try:
            os.close(w)
            _close_other_fds(r)
            _outer(init, r)
        finally:
            os._exit(128)
    os.close(r)
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    _mount_view(v)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    job = os.fork()
    if job:
        try:
            _close_other_fds(w)
            _init(job, w)
        finally:
            os._exit(128)
    os.close(w)
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_DFL)


def ns_init(outer: int) -> int | None:
    """The namespace's init (PID 1 inside, a child of the supervisor's child ``outer`` outside), or None."""
    try:
        with open(f"/proc/{outer}/task/{outer}/children") as f:
            kids = [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return None
    mine = os.readlink("/proc/self/ns/pid")
    for pid in kids:
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") != mine:
                return pid
        except OSError:
            continue
    return None


def join(init: int, user_ns: bool) -> None:
    """In a forked child, before exec: enter the namespaces of a replica whose init is ``init`` (its user namespace
    first when fairpod is not root, then its mount and PID namespaces), then fork: returns in the grandchild, a
    process of the replica's PID namespace that sees the replica's files (its private ``/tmp``, what is hidden
    hidden). The child in between never returns: it waits for the grandchild and ends as it ended. A readiness
    command of a service runs so (:mod:`fairpod.executors.readycheck`): what the replica's own command sees, and
    nothing of the supervisor's."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    names = (("user",) if user_ns else ()) + ("mnt", "pid")
    fds = [os.open(f"/proc/{init}/ns/{n}", os.O_RDONLY | os.O_CLOEXEC) for n in names]  # before any is entered
    try:
        for fd in fds:
            _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(0)), "setns")
    finally:
        for fd in fds:
            os.close(fd)
    inner = os.fork()
    if inner:
        try:
            _close_other_fds(2)
            _ignore_stops()
            while True:
                try:
                    _, st = os.waitpid(inner, 0)
                    break
                except InterruptedError:
                    continue
            if os.WIFSIGNALED(st):
                sig = os.WTERMSIG(st)
                signal.signal(sig, signal.SIG_DFL)
                os.kill(os.getpid(), sig)
            os._exit(os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128)
        finally:
            os._exit(128)
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    os.chdir("/")


@cache
def supported() -> str | None:
    """None when this process can make the namespaces, else why not (probed in a child, once per process)."""
    pid = os.fork()
    if pid == 0:
        try:
            flags = CLONE_NEWNS | CLONE_NEWPID | (0 if os.geteuid() == 0 else CLONE_NEWUSER)
            unshare(flags)
            os._exit(0)
        except OSError as e:
            os._exit(e.errno or 1)
    _, st = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(st)
    return None if code == 0 else f"unshare of mount/PID namespaces refused: {os.strerror(code)}"
