"""All-reduce bus bandwidth across a node's GPUs (the NCCL part of InstanceConnectivity within a node).

``python -m fairpod.health.allreduce --ranks N`` starts N processes on this host (one per GPU, NCCL) that
all-reduce a ``--mib`` MiB float32 buffer ``--iters`` times and prints one JSON line: the bus bandwidth as
nccl-tests defines it (algorithm bandwidth x 2(N-1)/N), the time per all-reduce and whether the sum was right.
``--backend gloo --device cpu`` runs the same measurement on CPU processes (how the tests check it on machines
without GPUs). ``measure`` runs it as a subprocess with a time limit, so a hung collective cannot hang the check.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank(rank: int, world: int, port: int, backend: str, device: str, mib: int, iters: int, out: Any) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = torch.device("cuda", rank) if device == "cuda" else torch.device("cpu")
    if device == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        n = mib * 2**20 // 4
        buf = torch.full((n,), float(rank + 1), device=dev)
        for _ in range(2):  # warm-up (NCCL builds its rings here)
            dist.all_reduce(buf)
        buf.fill_(float(rank + 1))
        if device == "cuda":
            torch.cuda.synchronize(dev)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        if device == "cuda":
            torch.cuda.synchronize(dev)
        dt = (time.perf_counter() - t0) / iters
        want = float(world * (world + 1) // 2) * float(world) ** (iters - 1)
        ok = bool(abs(buf[0].item() - want) <= 1e-3 * want and abs(buf[-1].item() - want) <= 1e-3 * want)
        if rank == 0:
            algbw = mib * 2**20 / dt / 1e9
            out.put({"ranks": world, "backend": backend, "mib": mib, "seconds_per_allreduce": dt,
                     "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world - 1) / world, "correct": ok})
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args(argv)
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    port = _free_port()
    mp.start_processes(_rank, args=(a.ranks, port, a.backend, a.device, a.mib, a.iters, out), nprocs=a.ranks,
                       join=True, start_method="spawn")
    print(json.dumps(out.get()))
    return 0


def measure(ranks: int, *, backend: str = "nccl", device: str = "cuda", mib: int = 256, iters: int = 10,
            timeout: float = 300.0) -> dict[str, Any]:
    """Run the measurement in a subprocess; ``{"error": …}`` when it fails or exceeds ``timeout`` seconds."""
    cmd = [sys.executable, "-m", "fairpod.health.allreduce", "--ranks", str(ranks), "--backend", backend,
           "--device", device, "--mib", str(mib), "--iters", str(iters)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the ranks too: they are in its process group
        p.communicate()
        return {"error": f"the all-reduce did not finish within {timeout:g} s"}
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        return {"error": f"the all-reduce failed: {tail}"}
    return dict(json.loads(lines[-1]))


if __name__ == "__main__":
    sys.exit(main())
