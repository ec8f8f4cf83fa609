"""One job's output cannot fill the state disk: a live server (``fairpod up``) whose whole home (database, runs,
logs) is on a real 48 MiB tmpfs, ``policy.log_max_bytes`` 4 MiB, and a job that prints 100 MB (a 100 MB burst
filled such a disk in 3 s and every POST /jobs answered 503)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ..conftest import SEED_SPEC, Server, running

FLOOD = """
import sys
line = b"x" * 1023 + b"\\n"
for i in range(100):  # 100 MiB: 1 MiB blocks of numbered 1 KiB lines
    sys.stdout.buffer.write(b"".join(b"%08d " % (i * 1024 + j) + line[9:] for j in range(1024)))
sys.stdout.buffer.write(b"the end of the flood\\n")
sys.stdout.flush()
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    d = tmp_path / "state"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,mode=0755", "tmpfs", str(d)], check=True)
    try:
        yield d
    finally:
        if subprocess.run(["umount", str(d)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(d)], check=True)  # something still held it: detach it now


@pytest.fixture
def srv(small_disk: Path) -> Iterator[Server]:
    spec = yaml.safe_load(SEED_SPEC.read_text())
    spec["policy"]["log_max_bytes"] = 4 << 20
    yield from running(small_disk, yaml.safe_dump(spec))


def test_a_flood_of_output_keeps_to_the_cap_and_submits_keep_working(srv: Server, small_disk: Path,
                                                                     tmp_path: Path) -> None:
    s = srv
    (tmp_path / "flood.py").write_text(FLOOD)
    s.submit(name="flood", team="john", command=[sys.executable, str(tmp_path / "flood.py")],
             termination_grace_seconds=1)
    free: list[int] = []

    def free_mib() -> int:
        st = os.statvfs(small_disk)
        free.append(st.f_bavail * st.f_frsize >> 20)
        return free[-1]

    for i in range(20):  # submits while it floods (and after): each one answered 201
        s.submit(name=f"bystander-{i}", team="smith", command=["true"])
        free_mib()
        if s.job("flood")["state"] in ("Succeeded", "Failed"):
            break
    done = s.wait_state("flood", "Succeeded", 120)
    assert done["reason"] in ("exited 0", None) or "exited 0" in (done["reason"] or ""), done["reason"]
    s.submit(name="after", team="smith", command=["true"])
    log = next((s.home / "runs").glob("flood*/0/0/output.log"))
    assert log.stat().st_size <= (4 << 20) + 512, log.stat().st_size
    first = log.open("rb").readline().decode()
    dropped = int(first.split()[2])
    assert first.startswith("==== fairpod: ") and "bytes of older output dropped" in first and \
        "policy.log_max_bytes" in first, first
    assert 96 << 20 < dropped < 102 << 20, dropped  # about 100 MiB printed, about 2 to 4 MiB kept
    tail = s.cli("get-logs", "flood", "--tail", "2").stdout.splitlines()
    assert tail[0] == "the end of the flood" and tail[1].startswith("==== fairpod: replica ended"), tail
    print(f"free on the 48 MiB state disk while it flooded: at least {min(free_mib(), *free)} MiB")
    assert min(free_mib(), *free) > 24, free  # the disk never filled: at most 1.5 x the cap went to the log
