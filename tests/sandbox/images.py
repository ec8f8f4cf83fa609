"""Container images for the live container tests, built on this machine once and kept in podman's own storage
(no registry is reached): ``busybox`` (a scratch image holding the distribution's static busybox),
``python`` (a Debian root filesystem with python3, made with mmdebstrap from the mirror apt uses) and ``ray``
(that one plus the Ray of the test environment: the files of the ``ray`` distribution and of its required
dependencies, copied from this interpreter's site-packages, and a ``ray`` command; a stand-in for
``rayproject/ray``, which no test can pull). The tests skip, saying why, where podman or the tools cannot be had
(scripts/test.sh installs them as root)."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from fairpod.sandbox import container

BUSYBOX = "localhost/fairpod-test/busybox:2"
SETUID = "localhost/fairpod-test/setuid:1"
PYTHON = "localhost/fairpod-test/python:bookworm"
RAY = "localhost/fairpod-test/ray:{version}"
LOCK = Path(tempfile.gettempdir()) / "fairpod-test-images.lock"
APPLETS = ("sh", "cat", "ls", "sleep", "echo", "id", "env", "head", "dd", "test", "true", "kill", "tr", "grep",
           "touch", "mkdir", "mknod", "unshare", "stat")
# a setuid-root program, as an image a member controls may hold one: it says what it is, tries to become root,
# then reads (r:PATH) and writes (w:PATH) what it is told, saying what worked
ESCALATE = r"""
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char line[256];
    FILE *st = fopen("/proc/self/status", "r");
    int su = setuid(0), sg = setgid(0);
    printf("escalate: euid=%d egid=%d setuid(0)=%d setgid(0)=%d\n", (int)geteuid(), (int)getegid(), su, sg);
    while (st && fgets(line, sizeof line, st))
        if (!strncmp(line, "CapEff:", 7) || !strncmp(line, "NoNewPrivs:", 11)) printf("escalate: %s", line);
    for (int i = 1; i < argc; i++) {
        const char *p = argv[i] + 2;
        if (argv[i][0] == 'r') {
            char buf[65] = {0};
            int fd = open(p, O_RDONLY);
            if (fd < 0) { printf("escalate: cannot read %s: %s\n", p, strerror(errno)); continue; }
            ssize_t n = read(fd, buf, 64);
            printf("escalate: READ %s: %s\n", p, n > 0 ? buf : "(empty)");
            close(fd);
        } else {
            int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0) { printf("escalate: cannot write %s: %s\n", p, strerror(errno)); continue; }
            write(fd, "written\n", 8);
            close(fd);
            printf("escalate: WROTE %s\n", p);
        }
    }
    return 0;
}
"""


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


def _setuid(e: container.Engine, ref: str, tmp: Path) -> str | None:
    """busybox's image plus /bin/escalate (ESCALATE, compiled static here), owned by root, mode 4755."""
    if not shutil.which("gcc"):
        return "gcc is not installed"
    (tmp / "escalate.c").write_text(ESCALATE)
    p = subprocess.run(["gcc", "-static", "-O1", "-o", str(tmp / "escalate"), str(tmp / "escalate.c")],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return f"gcc -static: {p.stderr.strip()[-300:]}"
    (tmp / "Containerfile").write_text(f"FROM {BUSYBOX}\nCOPY --chmod=4755 escalate /bin/escalate\n")
    p = subprocess.run([e.path, "build", "-q", "-t", ref, str(tmp)], capture_output=True, text=True, timeout=300)
    return None if p.returncode == 0 else p.stderr.strip()[-300:]


def ray_files() -> dict[Path, str]:
    """The files of the ``ray`` distribution and of the distributions it requires (no extras), as installed for
    this interpreter: source path -> path under site-packages."""
    import importlib.metadata as md
    import re

    seen: dict[str, md.Distribution] = {}
    todo = ["ray"]
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen[name] = dist
        todo += [re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0] for r in dist.requires or [] if "extra" not in r]
    out: dict[Path, str] = {}
    for dist in seen.values():
        for f in dist.files or ():
            rel = str(f)
            if not rel.startswith("..") and "__pycache__" not in rel:
                out[Path(str(dist.locate_file(f)))] = rel
    return out


def _ray(e: container.Engine, ref: str, tmp: Path) -> str | None:
    """``python``'s image plus this environment's Ray (and what it requires) in its dist-packages."""
    site = tmp / "site"
    for src, rel in ray_files().items():
        if src.is_file():
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, site / rel)
    (tmp / "ray").write_text("#!/usr/bin/python3\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n")
    (tmp / "ray").chmod(0o755)
    (tmp / "python").write_text('#!/bin/sh\nexec /usr/bin/python3 "$@"\n')  # rayproject/ray's images have python
    (tmp / "python").chmod(0o755)
    (tmp / "Containerfile").write_text(f"FROM {PYTHON}\nCOPY site /usr/local/lib/python3.11/dist-packages\n"
                                       "COPY ray /usr/local/bin/ray\nCOPY python /usr/local/bin/python\n")
    p = subprocess.run([e.path, "build", "-q", "-t", ref, str(tmp)], capture_output=True, text=True, timeout=900)
    return None if p.returncode == 0 else p.stderr.strip()[-300:]


_BUILDERS = {"busybox": _busybox, "python": _python, "setuid": _setuid, "ray": _ray}


def derived(ref: str, base: str, files: dict[str, str], entrypoint: list[str] | None = None) -> str:
    """``ref`` (tagged locally, e.g. with a registry's name the tests cannot reach): ``base`` plus ``files``
    (path in the image -> text; executable) and, when given, its ``ENTRYPOINT``, built once."""
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
                if entrypoint is not None:
                    lines.append(f"ENTRYPOINT {json.dumps(entrypoint)}")
                (Path(tmp) / "Containerfile").write_text("\n".join(lines) + "\n")
                p = subprocess.run([e.path, "build", "-q", "-t", ref, tmp], capture_output=True, text=True,
                                   timeout=300)
                if p.returncode:
                    pytest.skip(f"cannot build the test image {ref}: {p.stderr.strip()[-300:]}")
    return ref


def busybox() -> str:
    return _build(engine(), BUSYBOX, "busybox")


def setuid() -> str:
    """An image with a setuid-root program (/bin/escalate: ESCALATE), on busybox's (built first)."""
    busybox()
    return _build(engine(), SETUID, "setuid")


def python() -> str:
    return _build(engine(), PYTHON, "python")


def ray() -> str:
    """Debian's python3 with this environment's Ray (tagged with its version), on ``python``'s image."""
    import importlib.metadata as md

    python()
    return _build(engine(), RAY.format(version=md.version("ray")), "ray")
