"""Which device files a replica may open: its own GPUs, and no other GPU of the node.

On cgroup v1 the replica's ``devices`` cgroup denies everything and then allows, by major number from
``/proc/devices``, every character and block device of the host except NVIDIA's: of those it allows
``/dev/nvidia<N>`` for its own GPUs and, when it has at least one, the control devices (``nvidiactl``,
``nvidia-modeset``, ``nvidia-uvm``, ``nvidia-caps``). A replica with no GPU opens none of them. Creating device
nodes (``mknod``) stays allowed, opening what was not allowed does not.
"""

from __future__ import annotations

from pathlib import Path

NVIDIA_MAJOR = 195  # /dev/nvidia<N> (minor N), nvidiactl (255), nvidia-modeset (254)
NVIDIA_CONTROL_MINORS = (254, 255)


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
        out += [f"c {NVIDIA_MAJOR}:{g} rwm" for g in gpus]
    out += [f"b {m}:* rwm" for m in dict.fromkeys(blocks)]
    return tuple(out)
