"""Which device files a replica may open: its own GPUs, and no other GPU of the node.

On cgroup v1 the replica's ``devices`` cgroup denies everything and then allows, by major number from
``/proc/devices``, every character and block device of the host except NVIDIA's: of those it allows
``/dev/nvidia<N>`` for its own GPUs and, when it has at least one, the control devices (``nvidiactl``,
``nvidia-modeset``, ``nvidia-uvm``, ``nvidia-caps``). A replica with no GPU opens none of them. Creating device
nodes (``mknod``) stays allowed, opening what was not allowed does not.

With the files sandbox (any cgroup version, so also on pure cgroup v2 hosts, which have no device cgroup), the
replica also gets a **private /dev** in its mount namespace (:func:`plan`, mounted by
:mod:`fairpod.sandbox.namespaces`): a fresh tmpfs with only what a process needs bound back from the host's
``/dev`` (``null``, ``zero``, ``full``, ``random``, ``urandom``, ``tty``, ``mqueue`` and ``infiniband`` where
present), its own ``shm`` tmpfs and ``pts`` (a new devpts instance, ``ptmx`` a link into it), the
``fd``/``stdin``/``stdout``/``stderr`` links and, when
it has GPUs, the NVIDIA control devices (every ``nvidia*`` file that is not a GPU: ``nvidiactl``, ``nvidia-uvm``,
``nvidia-uvm-tools``, ``nvidia-modeset``, ``nvidia-nvswitch*``, ...), the MIG capability devices of its own GPUs
and its own ``/dev/nvidia<N>``. A device file that is not there cannot be opened, whatever the cgroup allows.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

NVIDIA_MAJOR = 195  # /dev/nvidia<N> (minor N), nvidiactl (255), nvidia-modeset (254)
NVIDIA_CONTROL_MINORS = (254, 255)
SOURCE_ENV = "FAIRPOD_DEV_SOURCE"  # tests only: where the NVIDIA device files are taken from (default /dev)
CGROUP_ENV = "FAIRPOD_DEVICE_CGROUP"  # "off": no v1 device cgroup (tests: the private /dev alone at work)
BASIC = ("null", "zero", "full", "random", "urandom", "tty")
OPTIONAL = ("mqueue", "infiniband")  # bound when the host has them
LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
         ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx"))
CAPS = Path("/proc/driver/nvidia/capabilities")
_GPU = re.compile(r"nvidia(\d+)$")


@dataclass(frozen=True)
class Dev:
    """One entry of a private /dev: ``bind`` (a host file or directory at ``source``), ``dir``, ``link`` (to
    ``source``), ``tmpfs`` or ``devpts`` (a new instance: the replica's own ptys); ``name`` relative to /dev."""

    kind: str
    name: str
    source: str = ""


def cgroup_wanted() -> bool:
    return (os.environ.get(CGROUP_ENV) or "on").strip().lower() != "off"


def _cap_minors(gpu: int, caps: Path) -> list[int]:
    """The ``nvidia-caps`` minors of the MIG instances of GPU ``gpu`` (``DeviceFileMinor`` of each ``access``)."""
    out: list[int] = []
    for access in sorted((caps / f"gpu{gpu}" / "mig").glob("gi*/**/access")):
        try:
            for line in access.read_text().splitlines():
                if line.startswith("DeviceFileMinor:"):
                    out.append(int(line.split(":", 1)[1]))
        except (OSError, ValueError):
            continue
    return out


def plan(gpus: tuple[int, ...], source: str | None = None, host: str = "/dev", caps: Path = CAPS) -> tuple[Dev, ...]:
    """The private /dev of a replica that owns the GPUs ``gpus``: the basic devices from ``host``, the NVIDIA ones
    from ``source`` (``$FAIRPOD_DEV_SOURCE``, else ``host``). Only files that exist are listed."""
    src = Path(source or os.environ.get(SOURCE_ENV) or host)
    out = [Dev("bind", n, f"{host}/{n}") for n in BASIC if os.path.exists(f"{host}/{n}")]
    out += [Dev("bind", n, f"{host}/{n}") for n in OPTIONAL if os.path.isdir(f"{host}/{n}")]
    out += [Dev("link", n, t) for n, t in LINKS]
    out += [Dev("devpts", "pts"), Dev("tmpfs", "shm")]
    if not gpus:
        return tuple(out)
    try:
        names = sorted(os.listdir(src))
    except OSError:
        names = []
    for n in names:
        m = _GPU.match(n)
        if (m and int(m.group(1)) in gpus) or (n.startswith("nvidia") and not m and n != "nvidia-caps"):
            out.append(Dev("bind", n, str(src / n)))
    minors = [c for g in gpus for c in _cap_minors(g, caps)]
    if minors and (src / "nvidia-caps").is_dir():
        out.append(Dev("dir", "nvidia-caps"))
        out += [Dev("bind", f"nvidia-caps/nvidia-cap{c}", str(src / "nvidia-caps" / f"nvidia-cap{c}"))
                for c in dict.fromkeys(minors) if (src / "nvidia-caps" / f"nvidia-cap{c}").exists()]
    return tuple(out)


def _majors(text: str) -> tuple[list[tuple[int, str]], list[int]]:
    chars: list[tuple[int, str]] = []
    blocks: list[int] = []
    section = None
    for line in text.splitlines():
        if line.startswith("Character"):
            section = "c"
        elif line.startswith("Block"):
            section = "b"
        elif (parts := line.split(None, 1)) and parts[0].isdigit():
            if section == "c":
                chars.append((int(parts[0]), parts[1].strip() if len(parts) > 1 else ""))
            elif section == "b":
                blocks.append(int(parts[0]))
    return chars, blocks


def rules(gpus: tuple[int, ...], proc_devices: str | None = None) -> tuple[str, ...]:
    """The ``devices.allow`` lines for a replica that owns the GPUs ``gpus`` (CUDA indices = device minors)."""
    text = proc_devices if proc_devices is not None else Path("/proc/devices").read_text()
    chars, blocks = _majors(text)
    out = ["c *:* m", "b *:* m"]
    seen: set[int] = set()
    for major, name in chars:
        if major in seen:
            continue
        seen.add(major)
        if major == NVIDIA_MAJOR:
            if gpus:
                out += [f"c {major}:{g} rwm" for g in gpus] + [f"c {major}:{m} rwm" for m in NVIDIA_CONTROL_MINORS]
        elif name.startswith("nvidia"):  # nvidia-uvm, nvidia-caps, nvidia-nvswitch, ...
            if gpus:
                out.append(f"c {major}:* rwm")
        else:
            out.append(f"c {major}:* rwm")
    if NVIDIA_MAJOR not in seen and gpus:
        out += [f"c {NVIDIA_MAJOR}:{g} rwm" for g in gpus] + [f"c {NVIDIA_MAJOR}:{m} rwm" for m in NVIDIA_CONTROL_MINORS]
    out += [f"b {m}:* rwm" for m in dict.fromkeys(blocks)]
    return tuple(out)
