"""The v2 backend's file logic against a real cgroup2 mount. On a host whose controllers are bound to v1 the
mount has none, so only creating a group, moving a process in, listing and removing it are checked here;
limits and read-back run where the kernel gives v2 its controllers."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.sandbox import cgroups

from .conftest import wait_for


@pytest.fixture
def cgroup2(tmp_path: Path) -> Iterator[Path]:
    point = tmp_path / "cg2"
    point.mkdir()
    r = subprocess.run(["mount", "-t", "cgroup2", "none", str(point)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount cgroup2 here: {r.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=False)


def test_v2_group_holds_a_process_and_is_removed(cgroup2: Path) -> None:
    base = cgroup2 / f"fairpod-test-{uuid.uuid4().hex[:8]}"
    base.mkdir()
    try:
        h = cgroups.v2_at(base)
        lim = cgroups.Limits(
            mcpu=500 if "cpu" in h.controllers else None,
            memory_bytes=2**28 if "memory" in h.controllers else None,
            pids=32 if "pids" in h.controllers else None,
        )
        g = h.create("job.0.0", lim)
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], preexec_fn=g.join)
        try:
            assert g.pids() == [p.pid]
            if "cpu" in h.controllers:
                assert (base / "job.0.0" / "cpu.max").read_text().split() == ["50000", "100000"]
            if "memory" in h.controllers:
                assert (base / "job.0.0" / "memory.max").read_text().strip() == str(2**28)
            use = g.usage()
            assert use.oom_kills == 0
        finally:
            g.remove()  # cgroup.kill where the kernel has it, then rmdir
            p.kill()
            p.wait(10)
        g.remove()
        wait_for(lambda: not (base / "job.0.0").exists() or None, 10.0)
    finally:
        base.rmdir()


def test_pruning_reads_a_groups_age_on_the_kernels_clock_not_its_own(cgroup2: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``Hierarchy.prune`` (every supervisor calls it before it makes its replica's group) removes empty groups
    left by killed supervisors, by their age. A supervisor whose clock runs an hour ahead (libfaketime in the
    suite; a wrong clock on a host) keeps a group just made, whose replica has not entered it yet; one whose
    mtime is 20 minutes old goes, and one that holds a process stays."""
    import os
    import time

    base = cgroup2 / f"fairpod-test-{uuid.uuid4().hex[:8]}"
    base.mkdir()
    try:
        h = cgroups.v2_at(base)
        fresh, old, busy = (h.create(n, cgroups.Limits()) for n in ("fresh.0.0", "old.0.0", "busy.0.0"))
        long_ago = cgroups.kernel_now() - 1200
        os.utime(base / "old.0.0", (long_ago, long_ago))
        os.utime(base / "busy.0.0", (long_ago, long_ago))
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], preexec_fn=busy.join)
        try:
            ahead = time.time() + 3600
            monkeypatch.setattr(time, "time", lambda: ahead)  # this process's clock, an hour ahead
            h.prune()
            assert sorted(d.name for d in base.iterdir() if d.is_dir()) == ["busy.0.0", "fresh.0.0"]
        finally:
            monkeypatch.undo()
            busy.remove()
            p.kill()
            p.wait(10)
        for g in (fresh, old, busy):
            g.remove()
        wait_for(lambda: not any(d.is_dir() for d in base.iterdir()) or None, 10.0)
    finally:
        base.rmdir()
