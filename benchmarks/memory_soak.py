#!/usr/bin/env python3
"""Does the control plane's memory level off under a steady job load, or leak? A live ``fairpod up`` (local
executor, real processes, SQLite, the default sandbox) with Python's ``tracemalloc`` on (10 frames, from the first reading), fed a steady
load for ``--minutes``: ``--rate`` short jobs a second (a shell that sleeps ``--job-seconds``), each client also
listing its team's jobs and reading one job, as the CLI and the dashboard do. Every ``--every`` seconds the
server's RSS (``/proc/<pid>/status``) and traced memory are read, and a ``tracemalloc`` snapshot is taken (the
server dumps it on SIGUSR2). The report: RSS and traced memory over time, their growth per minute in the first
and the second half (a leak keeps its slope; a warm-up flattens), and the allocation sites that grew most
between the snapshot after ``--warmup`` seconds and the last one.

    .venv/bin/python benchmarks/memory_soak.py --minutes 10

Exit status 1 if nothing ran (no job finished), else 0: the figures are for a person to read.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _live import LiveServer, RawClient, exit_on_sigterm, table  # noqa: E402

SPEC = """
cluster:
  name: soak
  instance_groups:
    - {name: w, instance_type: ml.g5.12xlarge, count: 4}
teams:
  - name: john
    quota: [{instance_type: ml.g5.12xlarge, count: 2}]
    sharing: {strategy: LendAndBorrow, borrow_limit: 100}
  - name: smith
    quota: [{instance_type: ml.g5.12xlarge, count: 2}]
    sharing: {strategy: LendAndBorrow, borrow_limit: 100}
"""
FRAMES = 10  # frames kept per allocation
DUMP_ENV = "FAIRPOD_SOAK_DUMP"  # the server's side: where SIGUSR2 writes a snapshot


def serve() -> int:
    """The server's process: ``fairpod up --foreground`` as usual; on the first SIGUSR2 tracemalloc starts (on from
    the start, it made the imports and the start take minutes on a loaded machine; what grows later is traced all
    the same), and on each a snapshot is written to ``$FAIRPOD_SOAK_DUMP`` (from a thread: the handler only wakes
    it)."""
    from fairpod.cli.main import main

    wake = threading.Event()

    def dumper() -> None:
        n = 0
        while True:
            wake.wait()
            wake.clear()
            n += 1
            if not tracemalloc.is_tracing():
                tracemalloc.start(FRAMES)
            snap = tracemalloc.take_snapshot()
            path = Path(os.environ[DUMP_ENV]) / f"snap-{n}.pickle"
            snap.dump(str(path) + ".part")
            os.replace(str(path) + ".part", path)

    threading.Thread(target=dumper, daemon=True, name="soak-dumper").start()
    signal.signal(signal.SIGUSR2, lambda *_: wake.set())
    return main(sys.argv[2:])


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def snapshot(srv: LiveServer, dumps: Path, n: int, timeout: float = 300.0) -> tracemalloc.Snapshot:
    assert srv.proc is not None
    srv.proc.send_signal(signal.SIGUSR2)
    path = dumps / f"snap-{n}.pickle"
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no snapshot {path} within {timeout:g} s")
        time.sleep(0.2)
    return tracemalloc.Snapshot.load(str(path))


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) in value per minute."""
    if len(points) < 2:
        return float("nan")
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    den = sum((p[0] - mx) ** 2 for p in points)
    return 60.0 * sum((p[0] - mx) * (p[1] - my) for p in points) / den if den else float("nan")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        return serve()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=2.0, help="jobs submitted per second")
    ap.add_argument("--job-seconds", type=float, default=1.0)
    ap.add_argument("--every", type=float, default=30.0, help="seconds between readings and snapshots")
    ap.add_argument("--warmup", type=float, default=120.0, help="seconds before the first compared snapshot")
    ap.add_argument("--top", type=int, default=15, help="allocation sites to list")
    a = ap.parse_args()
    exit_on_sigterm()
    dumps_env = {DUMP_ENV: ""}
    srv = LiveServer(SPEC, launcher=(str(Path(__file__).resolve()), "--serve"), env=dumps_env, start_timeout=120)
    dumps = srv.tmp / "snapshots"
    dumps.mkdir()
    srv.env[DUMP_ENV] = str(dumps)
    with srv:
        assert srv.proc is not None
        pid = srv.proc.pid
        stop = threading.Event()
        done = [0]

        def load(team: str, rate: float) -> None:
            c = RawClient(srv)
            i = 0
            t0 = time.monotonic()
            try:
                while not stop.is_set():
                    i += 1
                    st, body = c.request("POST", "/jobs", {"name": f"{team}-{i}", "team": team, "accelerators": 1,
                                                           "command": ["sh", "-c", f"sleep {a.job_seconds}"]})
                    c.request("GET", f"/jobs?team={team}&limit=50")
                    if st == 201:
                        c.request("GET", f"/jobs/{body['id']}")
                    stop.wait(max(0.0, t0 + i / rate - time.monotonic()))
            finally:
                c.close()

        threads = [threading.Thread(target=load, args=(t, a.rate / 2), daemon=True) for t in ("john", "smith")]
        for t in threads:
            t.start()
        start = time.monotonic()
        rss: list[tuple[float, float]] = []
        traced: list[tuple[float, float]] = []
        snaps: list[tuple[float, tracemalloc.Snapshot]] = []
        n = 0
        while (now := time.monotonic() - start) < a.minutes * 60:
            n += 1
            snap = snapshot(srv, dumps, n)
            t = time.monotonic() - start
            kib = rss_kib(pid)
            size = sum(s.size for s in snap.statistics("filename"))
            rss.append((t, kib / 1024))
            traced.append((t, size / 2**20))
            if t >= a.warmup:
                snaps.append((t, snap))
            print(f"  {t:6.0f} s  RSS {kib / 1024:7.1f} MiB  traced {size / 2**20:7.1f} MiB", flush=True)
            time.sleep(max(0.0, a.every - (time.monotonic() - start - now)))
        stop.set()
        for t in threads:
            t.join(timeout=60)
        with srv.client() as c:
            done[0] = c.get("/jobs", params={"state": "Succeeded", "limit": 1}).json()["total"]
    half = [p for p in rss if p[0] >= a.warmup]
    mid = len(half) // 2
    rows = [("jobs succeeded", str(done[0])),
            ("RSS first -> last", f"{rss[0][1]:.1f} -> {rss[-1][1]:.1f} MiB"),
            ("traced first -> last", f"{traced[0][1]:.1f} -> {traced[-1][1]:.1f} MiB"),
            ("RSS slope after warm-up, 1st / 2nd half", f"{slope(half[:mid + 1]):.2f} / {slope(half[mid:]):.2f} MiB/min"),
            ("traced slope after warm-up, 1st / 2nd half",
             f"{slope([p for p in traced if p[0] >= a.warmup][:mid + 1]):.2f} / "
             f"{slope([p for p in traced if p[0] >= a.warmup][mid:]):.2f} MiB/min")]
    print(table(rows))
    if len(snaps) >= 2:
        (t_a, first), (t_b, last) = snaps[0], snaps[-1]
        print(f"allocation sites that grew most from {t_a:.0f} s to {t_b:.0f} s (tracemalloc, by line):")
        for d in last.compare_to(first, "lineno")[: a.top]:
            frame = d.traceback[0]
            print(f"  {d.size_diff / 1024:+9.1f} KiB {d.count_diff:+7d} blocks  {frame.filename}:{frame.lineno}")
        print("grouped by the deepest fairpod frame of each allocation:")
        grouped: dict[str, int] = {}
        for d in last.compare_to(first, "traceback"):
            where = next((f"{f.filename.split('/fairpod/')[-1]}:{f.lineno}" for f in reversed(d.traceback)
                          if "/fairpod/" in f.filename), "(outside fairpod)")
            grouped[where] = grouped.get(where, 0) + d.size_diff
        for where, diff in sorted(grouped.items(), key=lambda kv: -kv[1])[: a.top]:
            print(f"  {diff / 1024:+9.1f} KiB  {where}")
    return 0 if done[0] else 1


if __name__ == "__main__":
    raise SystemExit(main())
