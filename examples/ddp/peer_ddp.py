"""DDP training that recovers a lost replica from its peers' memory (``--recovery peers``) or from its last
checkpoint (``--recovery checkpoint``): the job of docs/sdk.md's "Recovery from peers" and benchmarks/recovery.py.

One process per fairpod replica (fairpod sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), gloo or nccl::

    fairpod start-job --name ddp --team john --node-count 3 --restarts-in-place 2 --peer-recovery \\
        -- python examples/ddp/peer_ddp.py --steps 400 --save_every 50 --recovery peers

A small MLP learns y = sum(x) from generated batches: step s of rank r always sees the same batch, so a run that
recovers ends with the same model as an undisturbed one. Rank 0 writes a checkpoint every ``--save_every`` steps
(and reports it); ``--out DIR`` (default: the job's checkpoint directory) gets each rank's completed steps
(``steps-RANK``: step, time, pid per line) and rank 0's final model (``final.pt``).

``--recovery checkpoint``: a collective that fails (a peer was lost) ends the process with exit 1; every start
resumes from the checkpoint (what a DDP job does today, restarted whole or in place).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from fairpod import sdk
from fairpod.sdk.peers import PeerRecovery


def batch(step: int, rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1_000_003 * step + rank)
    x = torch.randn(size, 16, generator=g)
    return x, x.sum(1, keepdim=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="DDP training that recovers a lost replica from peers or a checkpoint.")
    p.add_argument("--steps", type=int, default=200, help="steps to train (default 200)")
    p.add_argument("--save_every", type=int, default=50, help="rank 0 checkpoints every N steps (default 50)")
    p.add_argument("--recovery", choices=["peers", "checkpoint"], default="peers")
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--step_seconds", type=float, default=0.0, help="each step lasts at least this long")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a collective or a new group's forming may take")
    p.add_argument("--start_timeout", type=float, default=600.0,
                   help="seconds the wait for a lost replica's replacement may take (default 600)")
    p.add_argument("--out", type=Path, default=None,
                   help="where to write steps-RANK and final.pt (default: the job's checkpoint directory)")
    args = p.parse_args(argv)
    if args.steps < 1 or args.save_every < 1:
        p.error("--steps and --save_every must be at least 1")
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        p.error("run me as a fairpod job (or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT)")
    rank = int(os.environ["RANK"])
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", 0)  # fairpod's CUDA_VISIBLE_DEVICES: the replica's own GPU first
        torch.cuda.set_device(device)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    ckpt = sdk.checkpoint_dir() / "peer_ddp.pt"
    out = args.out or sdk.checkpoint_dir()
    out.mkdir(parents=True, exist_ok=True)

    if args.recovery == "peers":
        rec: PeerRecovery | None = PeerRecovery(model, opt, backend=args.backend, timeout=args.timeout,
                                                start_timeout=args.start_timeout)
        ddp = rec.wrap()
        step = rec.step
        if rec.replaced:  # when its start went where (benchmarks/replica_fault.py reads it)
            print(f"[RANK {rank}] replacement: " + " ".join(f"{k}={v:.3f}" for k, v in rec.phases.items()),
                  flush=True)
    else:
        rec = None
        dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=args.timeout))
        step = 0
    if step == 0 and ckpt.exists():  # a start of the job (not a replacement given a peer's state)
        snap = torch.load(ckpt, map_location=device, weights_only=True)
        model.load_state_dict(snap["model"])
        opt.load_state_dict(snap["optimizer"])
        step = int(snap["step"])
        if rec is not None:
            rec.step = step
        print(f"[RANK {rank}] resuming from the checkpoint at step {step}", flush=True)
    if rec is None:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(model, find_unused_parameters=True)  # the same reduction order as PeerRecovery.wrap
    caught: tuple[type[BaseException], ...] = rec.errors if rec is not None else ()
    log = open(out / f"steps-{rank}", "a")  # noqa: SIM115 - open for the whole run
    t_step = time.monotonic()
    while step < args.steps:
        try:
            opt.zero_grad()
            x, y = batch(step, rank, 32)
            loss = F.mse_loss(ddp(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
        except caught as e:
            print(f"[RANK {rank}] step {step + 1} failed ({str(e).splitlines()[0][:120]}); recovering from peers",
                  flush=True)
            ddp = rec.recover()  # type: ignore[union-attr]
            step = rec.step  # type: ignore[union-attr]
            print(f"[RANK {rank}] recovered at step {step}: {rec.last}", flush=True)  # type: ignore[union-attr]
            continue
        step += 1
        if rec is not None:
            rec.step = step
        log.write(f"{step} {time.time():.6f} {os.getpid()}\n")
        log.flush()
        if args.step_seconds:
            time.sleep(max(0.0, args.step_seconds - (time.monotonic() - t_step)))
        t_step = time.monotonic()
        if rank == 0 and (step % args.save_every == 0 or step == args.steps):
            with sdk.atomic_path(ckpt) as tmp:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, tmp)
            sdk.report_progress(step=step, checkpoint=ckpt)
    if rank == 0:
        torch.save(model.state_dict(), out / "final.pt")
    print(f"[RANK {rank}] done at step {step} (loss {loss.item():.6f})", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no teardown of the gloo group while peers exit (see ddp.py)
