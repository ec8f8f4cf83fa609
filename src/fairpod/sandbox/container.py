"""A replica in a container image: the engine of this host, the image's pull, and the ``podman run`` of it.

The replica supervisor (:mod:`fairpod.executors.supervisor`) calls this when a replica's ``launch.json`` has a
``container`` (``{"image", "pull", "mounts"}``), so the local executor and the Ray node agents run images the
same way. The replica keeps the rules of its sandbox (docs/containers.md):

- **cgroup**: the container's cgroup is made inside the replica's own (``--cgroup-parent``), so the replica's
  memory limit, usage and out-of-memory reason are read where they are for host commands; ``--cpus`` and
  ``--pids-limit`` repeat its CPU and pids limits on the container's own cgroup;
- **devices**: only its GPUs (CDI names from the NVIDIA container toolkit when this host has a CDI spec, else
  ``--device`` for its ``/dev/nvidia<N>`` and the control devices);
- **files**: the image's root filesystem, and of the host only the job's checkpoint directory, its working
  directory and the mounts the job names, each at its own path (checked by :mod:`fairpod.sandbox.hostpaths`);
- **user**: as root, the team's user ``fairpod-<team>`` (its uid and gid), or the ``run_as`` user, in a user
  namespace that maps only that user (the container's root), with no capability and no gain of privileges
  (:func:`hardening`);
- **environment**: the same variables as a host command (``FAIRPOD_*``, torchrun's), with the image's ``PATH``;
- **network**: the host's (``MASTER_ADDR``/``MASTER_PORT`` work across nodes as for host commands).

The engine is podman (daemonless). Its OCI runtime is chosen here: crun cannot set limits on a host whose
cgroups are a v1/v2 hybrid, so on cgroup v1 hosts runc is used when installed.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import resource
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairpod.sandbox.devices import SOURCE_ENV
from fairpod.sandbox.hostpaths import own_shm

ENGINE_ENV = "FAIRPOD_CONTAINER_ENGINE"  # the engine's path (default: podman on PATH)
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
NVIDIA_CONTROL = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
POLICIES = ("Always", "IfNotPresent", "Never")
PULL_TIMEOUT = 1800.0
VIEW_TTL = 10.0
RAY_LAUNCHER = "/run/fairpod/raycluster.py"  # where a Ray job's launcher is in its container (server.core.transitions.rayjobs)


@dataclass(frozen=True)
class Engine:
    """The container engine of this host: its path, version and the OCI runtime it is told to use."""

    path: str
    version: str
    runtime: str
    why: str  # why that runtime
    init: bool = True  # catatonit is there for --init (a stop's SIGTERM reaches the command through it)

    def describe(self) -> str:
        return f"podman {self.version} ({self.runtime}: {self.why})"


def _hybrid() -> bool:
    """True when the cgroup v1 controllers are mounted (a v1 host, or a v1/v2 hybrid)."""
    try:
        return any(p.name in ("memory", "cpu") for p in Path("/sys/fs/cgroup").iterdir() if p.is_dir())
    except OSError:
        return False


def choose_runtime(have: dict[str, bool], v1: bool) -> tuple[str, str] | None:
    """The OCI runtime for podman and why: runc on cgroup v1 and hybrid hosts (crun refuses limits there),
    crun on cgroup v2 when installed (podman's default), else whichever is installed."""
    if v1 and have.get("runc"):
        return "runc", "cgroup v1 controllers: crun cannot set limits here"
    if not v1 and have.get("crun"):
        return "crun", "cgroup v2"
    for name in ("runc", "crun"):
        if have.get(name):
            return name, "the only OCI runtime installed"
    return None


@functools.cache
def detect() -> Engine | None:
    """This host's engine, or None when podman or an OCI runtime is missing (cached per process)."""
    path = os.environ.get(ENGINE_ENV) or shutil.which("podman")
    if not path or not os.access(path, os.X_OK):
        return None
    have = {n: shutil.which(n) is not None for n in ("runc", "crun")}
    chosen = choose_runtime(have, _hybrid())
    if chosen is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    version = out.split()[-1] if out.split() else "?"
    init = any(os.access(p, os.X_OK) for p in ("/usr/libexec/podman/catatonit", "/usr/bin/catatonit"))
    return Engine(path, version, chosen[0], chosen[1], init)


def default_policy(image: str) -> str:
    """Kubernetes' default ``imagePullPolicy``: Always for ``:latest`` or no tag, else IfNotPresent."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _run(argv: list[str], timeout: float) -> tuple[int, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:g}s"
    except OSError as e:
        return 126, str(e.strerror or e)
    return p.returncode, (p.stderr or p.stdout).strip()


def present(engine: Engine, image: str) -> bool:
    return _run([engine.path, "image", "exists", image], 60)[0] == 0


def pull(engine: Engine, image: str, policy: str, auth_file: str | None = None) -> tuple[str | None, str]:
    """Pull ``image`` as ``policy`` says. Returns (the failure reason or None, what happened, for the log).

    ``Always`` asks the registry at every start; when the registry cannot be reached and the node has the image,
    the cached one runs (podman's ``newer`` policy: the log says so). ``Never`` runs only a cached image."""
    if policy in ("Never", "IfNotPresent"):
        if present(engine, image):
            return None, f"image {image} cached on this node"
        if policy == "Never":
            return f"image {image} is not on this node (imagePullPolicy Never)", ""
    argv = [engine.path, "pull", "--quiet"] + (["--authfile", auth_file] if auth_file else []) + [image]
    code, out = _run(argv, PULL_TIMEOUT)
    if code == 0:
        return None, f"image {image} pulled"
    answer = _registry_answer(out)
    if policy == "Always" and present(engine, image):
        return None, f"image {image}: the registry was not reached ({answer}); the cached image runs"
    return f"image pull failed: {image}: {answer}", ""


def _registry_answer(out: str) -> str:
    """The last line of podman's error, without its ``Error: `` prefix."""
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    last = lines[-1] if lines else "no answer"
    return re.sub(r"^Error:\s*", "", last)[:500]


def gpu_flags(gpus: tuple[int, ...], dev: Path | None = None, cdi: bool | None = None) -> list[str]:
    """The flags that give a container exactly ``gpus`` (CUDA indices): CDI names when the NVIDIA container
    toolkit wrote a CDI spec on this host, else ``--device`` for ``/dev/nvidia<N>`` and the control devices
    (from ``$FAIRPOD_DEV_SOURCE`` in fairpod's tests; only files that exist, as the private /dev does)."""
    if not gpus:
        return []
    if cdi is None:
        cdi = any(Path(d).is_dir() and any(Path(d).glob("nvidia*.yaml")) for d in CDI_DIRS)
    if cdi:
        return [f"--device=nvidia.com/gpu={g}" for g in gpus]
    dev = dev or Path(os.environ.get(SOURCE_ENV) or "/dev")
    out = [f"--device={dev / f'nvidia{g}'}" for g in gpus if (dev / f"nvidia{g}").exists()]
    if not out:
        return []  # a node whose GPUs are slots of a test cluster: no device to give
    out += [f"--device={dev / c}" for c in NVIDIA_CONTROL if (dev / c).exists()]
    caps = dev / "nvidia-caps"
    if caps.is_dir():
        out += [f"--device={p}" for p in sorted(caps.iterdir())]
    return out


def name_of(spec: dict[str, Any], where: str = "") -> str:
    """The container's name: the replica's, and a digest of its run directory ``where`` (two fairpods on one
    host never share a name; the same replica started again replaces what a crash left)."""
    tail = f"-{hashlib.sha1(where.encode()).hexdigest()[:8]}" if where else ""
    return f"fairpod-{spec.get('job')}.{spec.get('attempt')}.{spec.get('rank')}{tail}"



def remove_killed(spec: dict[str, Any], where: str, engine_proc: object, killed: bool, status: int | None) -> None:
    """Remove the container of the replica ``spec`` run in ``where`` (see :func:`name_of`) when the supervisor killed
    its engine (SIGKILL at the end of the grace period: ``killed``; ended by a signal, or not reaped after an abort:
    ``status``). ``run --rm`` did not live to remove it, and its monitor (conmon, re-parented to the supervisor, a
    subreaper) was killed with the rest, so nothing would: the engine would list it as running with no process for
    ever. Nothing to do for a replica without a container, or whose engine never started (``engine_proc`` None)."""
    if not spec.get("container") or engine_proc is None or not (killed or status is None or os.WIFSIGNALED(status)):
        return
    engine = detect()
    if engine is None:
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run([engine.path, "rm", "--force", "--ignore", "--time", "0", name_of(spec, where)],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)

def run_argv(engine: Engine, spec: dict[str, Any], env: dict[str, str], *, user: tuple[int, ...] | None,
             cgroup_parent: str | None, pids: int | None, name: str | None = None) -> list[str]:
    """``podman run`` of one replica (see the module's docstring); ``env`` is its whole environment; ``user``:
    (uid, gid, its supplementary gids...)."""
    c = spec["container"]
    lim = spec.get("limits") or {}
    argv = [engine.path, "--runtime", engine.runtime, "--cgroup-manager", "cgroupfs", "run", "--rm",
            "--replace", "--name", name or name_of(spec), "--network", "host", "--pull", "never", "--log-driver", "none",
            "--stop-signal", "TERM", "--ulimit", f"nofile={_nofile()}"] + (["--init"] if engine.init else [])
    if pids:
        argv += ["--ulimit", f"nproc={pids}:{pids}", "--pids-limit", str(pids)]
    if cgroup_parent:  # conmon stays out of it: the OOM killer of the replica's cgroup never takes the monitor
        argv += ["--cgroup-parent", cgroup_parent, "--cgroups", "no-conmon"]
    if lim.get("mcpu"):
        argv += ["--cpus", f"{int(lim['mcpu']) / 1000:g}"]
    argv += hardening(user)
    if spec.get("umask") is not None:  # run as its submitter: the files are made as theirs would be
        argv += ["--umask", f"{int(spec['umask']):04o}"]
    seen: set[str] = set()
    workdir = c.get("workdir")  # the job's own, if it named one: mounted at its path (else the image's)
    for d in _own_dirs(spec):
        if d not in seen:
            seen.add(d)
            argv += ["--volume", f"{d}:{d}"]
    if workdir and workdir not in seen:  # from where it resolved to on the host (fairpod.sandbox.hostpaths)
        argv += ["--volume", f"{c.get('workdir_source') or workdir}:{workdir}"]
    for m in c.get("mounts") or ():
        if own_shm(m):  # its own /dev/shm, as large as its memory may grow (podman's default is 64 MiB)
            argv += ["--shm-size", f"{int(lim['mib'])}m"] if lim.get("mib") else []
        else:
            argv += ["--volume", m]
    argv += scratch_flags(c.get("scratch") or (), lim.get("mib"))
    if workdir:
        argv += ["--workdir", str(workdir)]
    if c.get("launcher"):  # a Ray job's launcher (fairpod.executors.raycluster), the node's own file
        argv += ["--volume", f"{c['launcher']}:{RAY_LAUNCHER}:ro"]
        serve = os.path.join(os.path.dirname(str(c["launcher"])), "rayserve.py")  # its Serve driver, beside it
        if os.path.isfile(serve):
            argv += ["--volume", f"{serve}:{os.path.dirname(RAY_LAUNCHER)}/rayserve.py:ro"]
    if c.get("entrypoint") == "replace" and spec.get("command"):  # Kubernetes' command: no ENTRYPOINT before it
        argv += ["--entrypoint", ""]
    argv += gpu_flags(tuple(int(g) for g in lim.get("gpus") or ()))
    for k, v in sorted(env.items()):
        if k != "PATH" or "PATH" in (spec.get("env") or {}):  # the image's PATH unless the job set one
            argv += ["--env", f"{k}={expand(v, env)}"]
    argv.append(c["image"])
    return argv + [expand(a, env) for a in spec.get("command") or []]


def hardening(user: tuple[int, ...] | None) -> list[str]:
    """What keeps the container's processes from any privilege on the host: no capability at all, no gain of
    privileges (a setuid or file-capability binary of the image gives none), and, when fairpod runs as root, a
    user namespace of the replica's user alone: the container's root is that user (``user``: its uid and gid),
    and its supplementary groups (``user[2:]``, a submitter's under identity unix) are the container's gids 1, 2,
    ... that its processes hold, so a host directory of one of those groups is open to it as on the host; no
    other id of the host is mapped. The image's files owned by root are the user's inside; any other owner
    shows as ``nobody``. (Not root: podman is rootless, its user namespace already maps fairpod's own user.)"""
    argv = ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    if user is None:
        return argv
    if os.geteuid() != 0:
        return argv + ["--user", f"{user[0]}:{user[1]}"]
    extra = [g for g in dict.fromkeys(user[2:]) if g != user[1]]
    argv += ["--uidmap", f"0:{user[0]}:1", "--gidmap", f"0:{user[1]}:1"]
    for i, g in enumerate(extra, 1):
        argv += ["--gidmap", f"{i}:{g}:1"]
    return argv + ["--user", "0:0"] + [f for i in range(1, len(extra) + 1) for f in ("--group-add", str(i))]


def scratch_flags(scratch: Any, mib: Any = None) -> list[str]:
    """A job's scratch directories (``PATH[:MIB]``, Kubernetes' emptyDir) as tmpfs mounts, counted in the
    container's memory; ``/dev/shm`` is podman's own, sized (default: the replica's memory limit, as an emptyDir
    of medium Memory is)."""
    out: list[str] = []
    for d in scratch:
        path, _, size = str(d).partition(":")
        if path == "/dev/shm":
            top = size or (str(int(mib)) if mib else "")
            out += ["--shm-size", f"{top}m"] if top else []
        else:
            out += ["--tmpfs", f"{path}:rw,nosuid,nodev,mode=1777" + (f",size={size}m" if size else "")]
    return out


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` in a container's env and args: the variable's value; ``$$(VAR)`` stays
    ``$(VAR)``; an unknown variable is left as written."""
    return re.sub(r"\$(\$?)\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: f"$({m.group(2)})" if m.group(1) else env.get(m.group(2), m.group(0)), text)


def _own_dirs(spec: dict[str, Any]) -> list[str]:
    env = spec.get("env") or {}
    ckpt = env.get("FAIRPOD_CHECKPOINT_DIR")
    if not ckpt:
        return []
    return [ckpt] + ([ckpt.rstrip("/") + ".slurm"] if "FAIRPOD_SBATCH" in env else [])


def _nofile() -> str:
    """The open-files limit podman sets inside: this process's own (podman's default may exceed what a
    process without CAP_SYS_RESOURCE may set)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard = hard if hard != resource.RLIM_INFINITY else 1048576
    return f"{hard}:{hard}"


_VIEW: list[Any] = [0.0, None]  # (when, what) of node_view: one engine call per VIEW_TTL, not one per node


def node_view() -> dict[str, Any]:
    """This host's engine and cached images, for ``fairpod node list`` (read at most every VIEW_TTL seconds)."""
    now = time.monotonic()
    if _VIEW[1] is None or now - _VIEW[0] > VIEW_TTL:
        e = detect()
        view: dict[str, Any] = ({"engine": None, "why": "podman and runc (or crun) are not installed"} if e is None else
                {"engine": f"podman {e.version}", "runtime": e.runtime, "why": e.why, "images": images(e)})
        _VIEW[:] = [now, view]
    return dict(_VIEW[1])


def images(engine: Engine) -> list[str]:
    """The tagged images in this node's cache."""
    code, out = _run([engine.path, "images", "--format", "{{.Repository}}:{{.Tag}}"], 60)
    return sorted({ln for ln in out.splitlines() if ln and "<none>" not in ln}) if code == 0 else []


# what the engine, its OCI runtime or the container's init (catatonit) print when the command is not in the image
_NOT_FOUND = ("failed to exec pid1: No such file or directory", "executable file not found",
              "no such file or directory: OCI runtime attempted to invoke a command that was not found",
              "OCI runtime attempted to invoke a command that was not found")
_NOT_EXEC = ("failed to exec pid1: Permission denied", "permission denied: OCI permission denied")


def exec_failure(code: int | None, log: Path, container: dict[str, Any] | None, spec: dict[str, Any]) -> str | None:
    """The reason of a container replica that exited 1 (its init), 126 or 127 because its command could not be started in its image
    (the engine's words, e.g. ``ERROR (catatonit:6): failed to exec pid1: No such file or directory``, say neither
    which program nor which image): 'command not found in image IMAGE: PROGRAM'; None for any other end (and for
    a replica of no ``container``). ``spec``: the replica's launch (its command)."""
    if not container or code not in (1, 126, 127):  # catatonit (podman --init) exits 1, the engine 127 or 126
        return None
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            tail = f.read().decode(errors="replace")
    except OSError:
        return None
    if "==== fairpod: job " in tail:  # this run's output: after its header line (which quotes the command)
        tail = tail.rsplit("==== fairpod: job ", 1)[1].partition("\n")[2]
    if code == 1:  # only the init's own words: a program may well print an engine's phrase and exit 1
        tail = "\n".join(ln for ln in tail.splitlines() if ln.startswith("ERROR (catatonit:"))
    if any(s.lower() in tail.lower() for s in _NOT_FOUND):
        return f"command not found in image {container['image']}: {spec['command'][0]}"
    if any(s.lower() in tail.lower() for s in _NOT_EXEC):
        return f"command not executable in image {container['image']}: {spec['command'][0]}"
    return None
