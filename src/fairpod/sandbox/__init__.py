"""The sandbox of a replica: what a job's processes may use and see on its node.

Below every executor (the local executor and the Ray node agent both start replicas through
:mod:`fairpod.executors.supervisor`; ``srun`` steps of an sbatch job run inside the replica of their node), so
every way of running a job gets the same rules:

- :mod:`~fairpod.sandbox.cgroups`: a cgroup per replica (CPU quota from its vCPUs, memory without extra swap,
  a pids limit), its CPU-seconds and peak memory read back, an out-of-memory kill said plainly;
- :mod:`~fairpod.sandbox.devices`: only its own GPUs (device cgroup on v1; a private /dev with the files sandbox);
- :mod:`~fairpod.sandbox.capabilities`: what this host can enforce, and why not.

The executor puts the replica's limits in its ``launch.json`` (:func:`limits_of`); the supervisor makes a
:class:`Sandbox` from them before it starts the command, moves the command into it from the forked child
(:meth:`Sandbox.enter`) and, once every process has ended, reads the usage back and removes the cgroup
(:meth:`Sandbox.finish`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from fairpod.sandbox import cgroups, container, devices, hostpaths, namespaces, reach, users  # noqa: F401 - the supervisor uses them

PIDS_ENV = "FAIRPOD_PIDS_MAX"
DEFAULT_PIDS = 8192
MODE_ENV = "FAIRPOD_SANDBOX"
MODES = ("full", "limits", "off")  # full: limits and files; limits: cgroups only; off: neither


def mode() -> str:
    """``$FAIRPOD_SANDBOX`` of fairpod's process: ``full`` (the default), ``limits`` or ``off``."""
    m = (os.environ.get(MODE_ENV) or "full").strip().lower()
    return m if m in MODES else "full"


def own_dirs(spec: dict[str, Any]) -> list[Path]:
    """The directories of the job that its replicas keep in their view: the checkpoint directory and, for an
    sbatch job, the ``<checkpoint dir>.slurm`` beside it where its nodes meet (fairpod.formats.slurm.wire)."""
    env = spec.get("env") or {}
    ckpt = env.get("FAIRPOD_CHECKPOINT_DIR")
    if not ckpt:
        return []
    out = [Path(ckpt)]
    if "FAIRPOD_SBATCH" in env:
        out.append(Path(ckpt.rstrip("/") + ".slurm"))
    return out


def protected_of(spec: dict[str, Any], rdir: Path) -> list[str]:
    """fairpod's own directories on the node of the replica of ``rdir`` (``<runs>/<job>/<attempt>/<rank>``): its
    state directory, the CLI config, the database, the runs directory and the checkpoint root
    (fairpod.sandbox.hostpaths): hidden from a host command, never a host path a job may name."""
    runs = rdir.resolve().parents[2]
    ckpt = (spec.get("env") or {}).get("FAIRPOD_CHECKPOINT_DIR")
    root = Path(ckpt).parents[1] if ckpt else None  # <checkpoint root>/<team>/<job>
    return hostpaths.protected_dirs(runs, root if root is not None and len(root.parts) > 2 else None)


def paths_of(spec: dict[str, Any], rdir: Path, ids: tuple[int, int] | None) -> dict[str, Any] | None:
    """The host paths the launch of ``rdir`` names, checked by the rules of :mod:`~fairpod.sandbox.hostpaths` on
    this node now (allow-list: the launch's ``mounts_allow``), or :class:`~fairpod.sandbox.hostpaths.HostPathError`.
    A host command: its workdir, when the job named one (None returned). A container: its mounts, a missing source
    made as the user ``ids`` (as the kubelet and ``docker run -v`` make a hostPath directory) and checked again once
    made, and its workdir; returned with the resolved paths the engine binds (``workdir_source``)."""
    hp, protected = hostpaths, protected_of(spec, rdir)
    allow = list(spec.get("mounts_allow") or hp.DEFAULT_ALLOW)
    c = spec.get("container")
    if not c:
        if spec.get("workdir") and spec.get("named_workdir", True):
            hp.check(spec["workdir"], what=f"workdir {spec['workdir']}", allow=allow, protected=protected, bound=False)
        return None

    def checked(path: str, what: str) -> str:
        return hp.check(path, what=what, allow=allow, protected=protected, bound=True)

    mounts = []
    for m in c.get("mounts") or ():
        if hp.own_shm(m):  # the container's own /dev/shm (fairpod.sandbox.container)
            mounts.append(m)
            continue
        src, rest = m.split(":", 1)
        hp.make_as(checked(src, f"mount {m}"), ids, f"mount {m}")
        mounts.append(f"{checked(src, f'mount {m}')}:{rest}")
    wd = c.get("workdir")
    return {**c, "mounts": mounts, "workdir_source": checked(wd, f"workdir {wd}") if wd else None}


def view_of(spec: dict[str, Any], rdir: Path) -> namespaces.View:
    """What the replica of ``rdir`` (``<runs>/<job>/<attempt>/<rank>``) sees: fairpod's state directory, the runs
    and checkpoint roots and the CLI config hidden; its checkpoint and working directories kept (a working
    directory inside a hidden one is not: fairpod.sandbox.hostpaths refuses one a job names, and the default,
    the control plane's own, is never brought back from there)."""
    hide = protected_of(spec, rdir)
    db = os.environ.get("FAIRPOD_DB_URL") or ""
    if db.startswith("sqlite:///"):
        hide += [db[len("sqlite:///"):] + sfx for sfx in ("-wal", "-shm")]
    keep = [str(d) for d in own_dirs(spec)]
    wd = spec.get("workdir")
    if wd and not any(hostpaths.inside(hostpaths.resolve(str(wd)), hostpaths.resolve(h)) for h in hide):
        keep.append(str(wd))
    hide = [h for h in dict.fromkeys(hide) if h not in ("/", "/tmp")]
    gpus = tuple(int(g) for g in (spec.get("limits") or {}).get("gpus") or ())
    return namespaces.View(hide=tuple(hide), keep=tuple(keep), user_ns=os.geteuid() != 0, dev=devices.plan(gpus))


def limits_of(mcpu: int, mib: int, gpus: tuple[int, ...] | None) -> dict[str, Any]:
    """The ``limits`` of a replica's ``launch.json``: ``gpus`` are its CUDA device indices, or None when its
    accelerators are slots of a virtual node (then it gets no GPU device either)."""
    return {"mcpu": mcpu or None, "mib": mib or None, "gpus": list(gpus) if gpus is not None else []}


def _gib(mib: int) -> str:
    return f"{mib / 1024:.3g} GiB"


class Sandbox:
    """One replica's cgroup (or the reason it has none, in ``notes``)."""

    def __init__(self, spec: dict[str, Any], view: namespaces.View | None = None, rdir: Path | None = None) -> None:
        self.notes: list[str] = []
        self.group: cgroups.Group | None = None
        self.oom_fd: int | None = None  # a container's replica on v1: container_parent()
        self.engine_parent: str | None = None
        self.view = view
        lim = spec.get("limits") or {}
        self.mib = int(lim.get("mib") or 0)
        try:
            pids = int(os.environ.get(PIDS_ENV) or DEFAULT_PIDS)
        except ValueError:
            pids = DEFAULT_PIDS
        self.pids_max = pids if pids > 0 else None
        rules = None
        if devices.cgroup_wanted():
            try:
                rules = devices.rules(tuple(int(g) for g in lim.get("gpus") or ()))
            except OSError:
                pass
        limits = cgroups.Limits(
            mcpu=int(lim["mcpu"]) if lim.get("mcpu") else None,
            memory_bytes=self.mib * 2**20 if self.mib else None,
            pids=pids if pids > 0 else None,
            devices=rules,
        )
        try:
            hier = cgroups.detect()
            self.group = hier.create(group_name(spec.get("job"), spec.get("attempt"), spec.get("rank"), rdir), limits)
        except cgroups.CgroupError as e:
            self.notes.append(f"limits not enforced: {e}")

    def enter(self) -> None:
        """In the forked child, before exec: join the replica's cgroup, then (with a view) its namespaces; returns
        in the process that becomes the command."""
        if self.group is not None:
            self.group.join(0)
        if self.view is not None:
            namespaces.enter(self.view)

    def pids(self) -> list[int]:
        return self.group.pids() if self.group is not None else []

    def container_parent(self) -> str | None:
        """Where a container engine makes the container's cgroup: inside this replica's (its memory cgroup's
        path on v1), so that its memory limit and usage are this replica's. On v1 the kernel counts an
        out-of-memory kill in the container's own cgroup, which the engine removes as it ends: the replica's
        group is watched for out-of-memory events from here on instead."""
        if self.group is None:
            return None
        if isinstance(self.group, cgroups.GroupV1) and self.oom_fd is None:
            self.oom_fd = self.group.watch_oom()
        d = self.group.dirs.get("memory") or self.group.dirs.get("")
        self.engine_parent = cgroups.relative(d) if d is not None else None
        return self.engine_parent

    def finish(self, result: dict[str, Any]) -> None:
        """Add the replica's usage to its exit record, say so when the memory limit killed it, remove the cgroup."""
        if self.group is None:
            return
        parent = self.engine_parent
        use = self.group.usage()
        result["usage"] = {"cpu_seconds": use.cpu_seconds, "memory_peak_bytes": use.memory_peak_bytes}
        killed = cgroups.oom_events(self.oom_fd) > 0 and result.get("returncode") == 137  # the engine's SIGKILL code
        self.oom_fd = None
        if (use.oom_kills or killed) and result.get("returncode") != 0 and self.mib:
            result["reason"] = f"exceeded its memory limit ({_gib(self.mib)}) and was killed"
            result["oom"] = True
        self.group.remove()
        if parent is not None and self.group.kind == "v1":
            cgroups.remove_at(parent)  # what the engine made at that path in the other controllers


def group_name(job: Any, attempt: Any, rank: Any, rdir: Path | None) -> str:
    """The cgroup of a replica: ``<job>.<attempt>.<rank>``, then a digest of its replica directory. Every fairpod
    of a host (a second install, a test server, a Ray node agent) makes its groups in the same subtree, and job
    names repeat across them (``john-train-1``): without the directory, a replica ending in one took the other's
    same-named replica for what its command left behind, sent it SIGTERM and 5 s later killed its group."""
    name = f"{job}.{attempt}.{rank}"
    if rdir is None:
        return name
    return f"{name}.{hashlib.sha256(os.path.realpath(rdir).encode()).hexdigest()[:12]}"


def discard(job: str, attempt: int, rank: int, rdir: Path | None = None) -> None:
    """After its supervisor died: kill what is left in the replica's cgroup and remove the cgroup."""
    try:
        cgroups.detect().discard(group_name(job, attempt, rank, rdir))
    except cgroups.CgroupError:
        pass


def usage_of(status: dict[str, Any]) -> dict[str, Any]:
    """``cpu_seconds`` and ``memory_peak_bytes`` of an exit record (``status.json``), for :class:`ReplicaExit`."""
    use = status.get("usage") or {}
    cpu, peak = use.get("cpu_seconds"), use.get("memory_peak_bytes")
    return {"cpu_seconds": float(cpu) if isinstance(cpu, int | float) else None,
            "memory_peak_bytes": int(peak) if isinstance(peak, int) else None}
