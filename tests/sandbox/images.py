"""Container images for the live container tests, built on this machine once and kept in podman's own storage
(no registry is reached): ``busybox`` (a scratch image holding the distribution's static busybox) and
``python`` (a Debian root filesystem with python3, made with mmdebstrap from the mirror apt uses). The tests
skip, saying why, where podman or the tools cannot be had (scripts/test.sh installs them as root)."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from fairpod.sandbox import container

BUSYBOX = "localhost/fairpod-test/busybox:1"
PYTHON = "localhost/fairpod-test/python:bookworm"
LOCK = Path(tempfile.gettempdir()) / "fairpod-test-images.lock"
APPLETS = ("sh", "cat", "ls", "sleep", "echo", "id", "env", "head", "dd", "test", "true", "kill")


def engine() -> container.Engine:
    e = container.detect()
    if e is None:
        pytest.skip("no container engine: podman and runc (or crun) are not installed (scripts/test.sh installs them)")
    return e


def _exists(e: container.Engine, ref: str) -> bool:
    return subprocess.run([e.path, "image", "exists", ref], capture_output=True).returncode == 0


def _build(e: container.Engine, ref: str, make: str) -> str:
    """``ref``, built by ``make`` unless podman's storage has it; one builder at a time on this machine."""
    if _exists(e, ref):
        return ref
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _exists(e, ref):
            with tempfile.TemporaryDirectory(prefix="fairpod-image-") as tmp:
                why = _BUILDERS[make](e, ref, Path(tmp))
                if why:
                    pytest.skip(f"cannot build the test image {ref}: {why}")
    return ref


def _busybox(e: container.Engine, ref: str, tmp: Path) -> str | None:
    bb = Path("/bin/busybox")
    if not bb.exists():
        return "the static busybox (Debian's busybox-static) is not installed"
    (tmp / "bin").mkdir()
    shutil.copy2(bb, tmp / "bin" / "busybox")
    for a in APPLETS:
        (tmp / "bin" / a).symlink_to("busybox")
    (tmp / "Containerfile").write_text('FROM scratch\nCOPY bin /bin\nCMD ["/bin/sh"]\n')
    p = subprocess.run([e.path, "build", "-q", "-t", ref, str(tmp)], capture_output=True, text=True, timeout=300)
    return None if p.returncode == 0 else p.stderr.strip()[-300:]


def _python(e: container.Engine, ref: str, tmp: Path) -> str | None:
    if not shutil.which("mmdebstrap"):
        return "mmdebstrap is not installed"
    tar = tmp / "rootfs.tar"
    p = subprocess.run(["mmdebstrap", "--quiet", "--variant=minbase", "--include=python3", "bookworm", str(tar)],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        return f"mmdebstrap: {p.stderr.strip()[-300:]}"
    p = subprocess.run([e.path, "import", "-q", str(tar), ref], capture_output=True, text=True, timeout=300)
    return None if p.returncode == 0 else p.stderr.strip()[-300:]


_BUILDERS = {"busybox": _busybox, "python": _python}


def derived(ref: str, base: str, files: dict[str, str]) -> str:
    """``ref`` (tagged locally, e.g. with a registry's name the tests cannot reach): ``base`` plus ``files``
    (path in the image -> text; executable), built once."""
    e = engine()
    if _exists(e, ref):
        return ref
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _exists(e, ref):
            with tempfile.TemporaryDirectory(prefix="fairpod-image-") as tmp:
                lines = [f"FROM {base}"]
                for i, (path, text) in enumerate(files.items()):
                    (Path(tmp) / f"f{i}").write_text(text)
                    (Path(tmp) / f"f{i}").chmod(0o755)
                    lines.append(f"COPY f{i} {path}")
                (Path(tmp) / "Containerfile").write_text("\n".join(lines) + "\n")
                p = subprocess.run([e.path, "build", "-q", "-t", ref, tmp], capture_output=True, text=True,
                                   timeout=300)
                if p.returncode:
                    pytest.skip(f"cannot build the test image {ref}: {p.stderr.strip()[-300:]}")
    return ref


def busybox() -> str:
    return _build(engine(), BUSYBOX, "busybox")


def python() -> str:
    return _build(engine(), PYTHON, "python")
