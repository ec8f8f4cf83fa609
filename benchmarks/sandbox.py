"""What the sandbox of a replica adds to submit→running and to exit→slot reuse.

    .venv/bin/python benchmarks/sandbox.py [--runs 200]

Runs, on this host's real cgroups (as root), what the supervisor does around the command, step by step:

- start (on the way to running): make the replica's cgroup with its limits (``Sandbox(spec)``: detect the
  hierarchy, mkdir, write the limits and the device rules), then start a process that joins it before exec;
  the same process started without a sandbox is the baseline, so the figure is what the sandbox adds;
- the same with the files sandbox too (mount and PID namespaces: fairpod's state and the CLI config hidden, its
  checkpoint and working directories kept, a private /tmp, a /proc of its own);
- the same with the files sandbox for a replica run as another user whose interpreter lies under a directory it
  cannot enter (this interpreter, for ``nobody``): planning what to bring back (:mod:`fairpod.sandbox.reach`) and
  the tmpfs and read-only binds that do it, against the files sandbox alone, alternated with it;
- the same with the files sandbox and a private /dev for a replica given GPU 1 of four (the basic devices bound
  from /dev; the NVIDIA files from device nodes made here with their real numbers, as on a GPU host: nvidia0-3,
  nvidiactl, nvidia-modeset, nvidia-uvm, nvidia-uvm-tools), against the files sandbox alone, alternated with it;
- end (before the exit record is written, so before the slot is free again): read CPU-seconds, peak memory and
  OOM kills back and remove the cgroup (``Sandbox.finish``).

Prints p50 / p90 in milliseconds of each (goal: ≤ 10 ms p50 each).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pwd
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fairpod.sandbox import Sandbox, cgroups, devices, limits_of, namespaces, reach


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200)
    a = ap.parse_args()
    try:
        h = cgroups.detect()
    except cgroups.CgroupError as e:
        print(f"no usable cgroups here: {e}")
        return 1
    base, start, end, full, reached, devd = [], [], [], [], [], []
    work = Path(tempfile.mkdtemp(prefix="fairpod-bench-", dir="/var/tmp"))
    (work / "home").mkdir()
    (work / "ckpt").mkdir()
    view = namespaces.View(hide=(str(work / "home"),), keep=(str(work / "ckpt"), "/"))
    files = namespaces.supported() is None
    gpu_dev = work / "dev"
    gpu_dev.mkdir()
    for name, (major, minor) in {**{f"nvidia{g}": (195, g) for g in range(4)}, "nvidiactl": (195, 255),
                                 "nvidia-modeset": (195, 254), "nvidia-uvm": (510, 0),
                                 "nvidia-uvm-tools": (510, 1)}.items():
        os.mknod(gpu_dev / name, 0o20666, os.makedev(major, minor))
    dev_plan = devices.plan((1,), str(gpu_dev))
    for i in range(a.runs):
        t0 = time.perf_counter()
        subprocess.run(["/bin/true"], check=True)
        base.append(time.perf_counter() - t0)
        spec = {"job": "bench", "attempt": 0, "rank": i, "limits": limits_of(500, 256, ())}
        t0 = time.perf_counter()
        box = Sandbox(spec)
        assert box.group is not None, box.notes
        subprocess.run(["/bin/true"], check=True, preexec_fn=box.enter)
        start.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        box.finish({"returncode": 0})
        end.append(time.perf_counter() - t0)
    nobody = pwd.getpwnam("nobody")
    ops: tuple[reach.Op, ...] = ()
    for i in range(a.runs if files else 0):  # after the first loop: namespaces torn down do not slow it
        spec = {"job": "bench", "attempt": 1, "rank": i, "limits": limits_of(500, 256, ())}
        t0 = time.perf_counter()
        box = Sandbox(spec, view)
        subprocess.run(["/bin/true"], check=True, preexec_fn=box.enter)
        full.append(time.perf_counter() - t0)
        box.finish({"returncode": 0})
        spec = {"job": "bench", "attempt": 2, "rank": i, "limits": limits_of(500, 256, ())}
        t0 = time.perf_counter()
        ops = reach.plan(reach.wanted("python", str(Path(sys.executable).parent), "/"), nobody.pw_uid,
                         (nobody.pw_gid,), view.hide)
        box = Sandbox(spec, dataclasses.replace(view, reach=ops))
        subprocess.run(["/bin/true"], check=True, preexec_fn=box.enter)
        reached.append(time.perf_counter() - t0)
        box.finish({"returncode": 0})
        spec = {"job": "bench", "attempt": 3, "rank": i, "limits": limits_of(500, 256, (1,))}
        t0 = time.perf_counter()
        box = Sandbox(spec, dataclasses.replace(view, dev=devices.plan((1,), str(gpu_dev))))
        subprocess.run(["/bin/true"], check=True, preexec_fn=box.enter)
        devd.append(time.perf_counter() - t0)
        box.finish({"returncode": 0})
    for node in gpu_dev.iterdir():
        node.unlink()
    gpu_dev.rmdir()
    work.joinpath("home").rmdir()
    work.joinpath("ckpt").rmdir()
    work.rmdir()
    added = [s - b for s, b in zip(start, base, strict=True)]
    print(f"cgroup {h.kind}, {a.runs} replicas")
    print(f"start: process alone      p50 {pct(base, .5):6.2f} ms  p90 {pct(base, .9):6.2f} ms")
    print(f"start: in its sandbox     p50 {pct(start, .5):6.2f} ms  p90 {pct(start, .9):6.2f} ms")
    print(f"added to submit→running   p50 {statistics.median(added) * 1000:6.2f} ms")
    if full:
        fadded = [f - b for f, b in zip(full, base, strict=True)]
        print(f"start: with files too     p50 {pct(full, .5):6.2f} ms  p90 {pct(full, .9):6.2f} ms")
        print(f"added to submit→running   p50 {statistics.median(fadded) * 1000:6.2f} ms  (limits and files)")
        radded = [r - f for r, f in zip(reached, full, strict=True)]
        print(f"start: files + reach      p50 {pct(reached, .5):6.2f} ms  p90 {pct(reached, .9):6.2f} ms")
        print(f"added by reach            p50 {statistics.median(radded) * 1000:6.2f} ms  "
              f"(the interpreter for nobody: {'; '.join(f'{o.kind} {o.path}' for o in ops) or 'nothing to do'})")
        dadded = [d - f for d, f in zip(devd, full, strict=True)]
        print(f"start: files + /dev       p50 {pct(devd, .5):6.2f} ms  p90 {pct(devd, .9):6.2f} ms")
        print(f"added by the private /dev p50 {statistics.median(dadded) * 1000:6.2f} ms  "
              f"({len(dev_plan)} entries, GPU 1 of 4)")
    print(f"added to exit→slot reuse  p50 {pct(end, .5):6.2f} ms  p90 {pct(end, .9):6.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
