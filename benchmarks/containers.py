"""What running a replica in a container image adds to submit→running, with the image cached on the node.

    .venv/bin/python benchmarks/containers.py [--runs 20] [--image localhost/fairpod-test/busybox:1]

On this host's local executor (real supervisors, cgroups and podman), alternately: a 1-replica job
``sh -c 'echo up'`` as a host command, and the same job in the image (``imagePullPolicy: IfNotPresent``: the
cache is looked up, nothing is pulled). For each, the time from ``launch`` to the command's first output (the
command is running), and to its exit record (the slot is free again). The image is the one the container tests
build and cache (``python -m pytest tests/sandbox/test_container_live.py`` builds it once).

Prints p50 / p90 in milliseconds of each, and the p50 the image adds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fairpod.executors import LocalExecutor
from fairpod.executors.base import JobLaunch, ReplicaLaunch
from fairpod.sandbox import container


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] * 1000


def one(ex: LocalExecutor, root: Path, name: str, image: str | None) -> tuple[float, float]:
    t0 = time.monotonic()
    ex.launch(JobLaunch(job=name, team="bench", attempt=0, command=["sh", "-c", "echo up"],
                        checkpoint_dir=str(root / "ck" / name), grace_seconds=1.0,
                        container={"image": image, "pull": "IfNotPresent", "mounts": [], "workdir": None}
                        if image else None,
                        replicas=(ReplicaLaunch(rank=0, node="n0", mcpu=1000, mib=256),)))
    log = root / "runs" / name / "0" / "0" / "output.log"
    running = None
    for _ in range(60_000):  # bounded: at most ~60 s
        if running is None and log.exists() and "\nup\n" in log.read_text():
            running = time.monotonic() - t0
        exits = [e for e in ex.poll() if e.job == name]
        if exits:
            if not exits[0].ok:
                raise SystemExit(f"{name}: {exits[0].reason}")
            return running or time.monotonic() - t0, time.monotonic() - t0
        time.sleep(0.001)
    raise SystemExit(f"{name} did not end in 60 s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--image", default="localhost/fairpod-test/busybox:1")
    a = ap.parse_args()
    engine = container.detect()
    if engine is None or not container.present(engine, a.image):
        print(f"no podman here, or no image {a.image} in its cache (see the docstring)", file=sys.stderr)
        return 1
    root = Path(tempfile.mkdtemp(prefix="fairpod-bench-", dir="/var/tmp"))
    host_run, host_end, img_run, img_end = [], [], [], []
    with LocalExecutor(root / "runs") as ex:
        one(ex, root, "warm-host", None)
        one(ex, root, "warm-image", a.image)
        for i in range(a.runs):
            r, e = one(ex, root, f"host-{i}", None)
            host_run.append(r)
            host_end.append(e)
            r, e = one(ex, root, f"image-{i}", a.image)
            img_run.append(r)
            img_end.append(e)
    print(f"engine: {engine.describe()}; image {a.image} (cached); {a.runs} runs each")
    for what, xs in (("host command: launch→running", host_run), ("in the image: launch→running", img_run),
                     ("host command: launch→exit record", host_end), ("in the image: launch→exit record", img_end)):
        print(f"{what:36} p50 {pct(xs, 0.5):8.1f} ms  p90 {pct(xs, 0.9):8.1f} ms")
    print(f"{'added to submit→running':36} p50 {(statistics.median(img_run) - statistics.median(host_run)) * 1000:8.1f} ms")
    print(f"{'added to exit→slot reuse':36} p50 "
          f"{(statistics.median(img_end) - statistics.median(host_end) - (statistics.median(img_run) - statistics.median(host_run))) * 1000:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
