"""The host paths a job names (a container's ``--mount`` sources and ``--workdir``, pyxis ``--container-mounts``,
a PyTorchJob's ``hostPath`` volumes and ``hyp --volume``, which all become the job's ``mounts``, and a host job's
``--workdir``): where they may be, checked after every symlink is resolved, and made as the job's user.

The rules (docs/isolation.md, "Host paths"):

- a path is resolved first (``realpath``: every symlink followed, ``..`` gone), so a symlink inside an allowed
  directory that points elsewhere is judged by where it points;
- it must lie inside a directory of the cluster spec's ``cluster.mounts.allow`` (default ``/``: anywhere else
  that the rules below leave);
- never inside fairpod's own directories (its state directory, the runs directory, the checkpoint root, the
  CLI config's directory: :func:`fairpod.sandbox.view_of` hides the same), whatever the allow-list says: the
  job's own checkpoint directory is the one way in, and fairpod binds it itself;
- a directory bound into a container (a mount, a container's workdir) may not hold one of those either (``/``,
  or ``/root`` when the state directory is ``/root/.fairpod``): a host job's workdir may, its view hides them;
- never the kernel's and the runtime's own file systems (``/proc``, ``/sys``, ``/dev``, ``/run``, ``/boot``):
  other jobs' processes, devices and sockets;
- a mount of ``/dev/shm`` at ``/dev/shm`` is no host path: the container gets its own (:func:`own_shm`);
- a mount source that does not exist yet is made (as the kubelet and ``docker run -v`` do) by a process that
  runs as the job's user, so it is made only where that user may write, and owned by it (never by root).

The control plane checks a job at submit (one line naming the field and the rule), and the replica's supervisor
checks again on its node right before the start (the paths may have changed since), then hands the resolved path
to the engine.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

SYSTEM = ("/proc", "/sys", "/dev", "/run", "/boot")
DEFAULT_ALLOW = ("/",)


def own_shm(mount: str) -> bool:
    """A mount of the host's ``/dev/shm`` at ``/dev/shm`` (PyTorchJobs name it as a ``hostPath`` for NCCL and data
    loaders): the container gets its own ``/dev/shm`` instead (fairpod.sandbox.container), never the host's,
    which holds other jobs' shared memory."""
    parts = mount.split(":")
    return len(parts) >= 2 and parts[0].rstrip("/") == "/dev/shm" and parts[1].rstrip("/") == "/dev/shm"


class HostPathError(ValueError):
    """A host path a job may not have; its text names the field and why (one line for the user)."""


def inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def resolve(path: str) -> str:
    """``path`` with every symlink of its existing part followed and ``..`` gone (what a bind mount reaches)."""
    return os.path.realpath(path)


def check(path: str, *, what: str, allow: Iterable[str], protected: Iterable[str], bound: bool) -> str:
    """The resolved ``path`` when the rules allow it (``bound``: it is bound into a container, so it may not hold
    a protected directory either); else :class:`HostPathError` naming ``what`` (e.g. ``--mount /:/host``)."""
    if not path.startswith("/"):
        raise HostPathError(f"{what}: {path} is not an absolute path")
    real = resolve(path)
    via = f" ({path} leads to {real})" if real != os.path.normpath(path) else ""
    for top in protected:
        top_real = resolve(top)
        if inside(real, top_real):
            raise HostPathError(f"{what}: {real}{via} is inside fairpod's own {top_real}, which no job may reach")
        if bound and inside(top_real, real):
            raise HostPathError(f"{what}: {real}{via} holds fairpod's own {top_real}, which no job may reach")
    for top in SYSTEM:
        if inside(real, top) or (bound and inside(top, real)):
            raise HostPathError(f"{what}: {real}{via} is or holds the host's {top}, which no job may mount")
    allowed = [resolve(a) for a in allow]
    if not any(inside(real, a) for a in allowed):
        raise HostPathError(f"{what}: {real}{via} is outside the directories the cluster allows "
                            f"(cluster.mounts.allow: {', '.join(allowed) or 'none'})")
    return real


def protected_dirs(runs: Path | None = None, checkpoint_root: Path | None = None) -> list[str]:
    """fairpod's own directories on this host: its state directory, the CLI config's directory (or file), the
    SQLite database, and the runs directory and checkpoint root when given (they may lie elsewhere)."""
    from fairpod.paths import config_path, fairpod_home

    out = [str(fairpod_home())]
    cfg = config_path()
    out.append(str(cfg.parent if cfg.parent.name == "fairpod" else cfg))
    db = os.environ.get("FAIRPOD_DB_URL") or ""
    if db.startswith("sqlite:///"):
        out.append(db[len("sqlite:///"):])
    out += [str(p) for p in (runs, checkpoint_root) if p is not None]
    return [p for p in dict.fromkeys(out) if p not in ("/", "")]


def make_as(path: str, ids: tuple[int, int] | None, what: str) -> None:
    """Make the directory ``path`` (and its missing parents) as the user ``ids`` (uid, gid; None: this process's
    own), in a forked child that has become that user, so nothing is made where it may not write. Raises
    :class:`HostPathError` with the reason. A file that exists is left as it is (pyxis's
    ``--container-mounts=/etc/os-release:/host/os-release`` binds a file)."""
    if os.path.exists(path):
        return
    if ids is None or os.geteuid() != 0:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise HostPathError(f"{what}: cannot make {path}: {e.strerror}") from None
        return
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the user's ids only, then the directories
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(ids[1], ids[1], ids[1])
            os.setresuid(ids[0], ids[0], ids[0])
            os.umask(0o022)
            os.makedirs(path, exist_ok=True)
            code = 0
        except OSError as e:
            os.write(w, (e.strerror or str(e)).encode()[:200])
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        why = f.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if status != 0 or not os.path.isdir(path):
        raise HostPathError(f"{what}: cannot make {path} as the job's user (uid {ids[0]}): {why or 'failed'}")
