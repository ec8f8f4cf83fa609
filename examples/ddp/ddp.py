"""Distributed data-parallel training that survives preemption: the seed post's ``ddp.py``, made resumable.

Launch it with torchrun (one torchrun per node), as in the seed post::

    torchrun --nnodes 2 --nproc_per_node 2 ... ddp.py TOTAL_EPOCHS SAVE_EVERY

A small MLP learns a linear function of 20 inputs from generated data (seeded: every run sees the same
data in the same order). Backend nccl when the node has a GPU for each of its processes, else gloo (``--backend`` to choose).

Checkpointing, with fairpod.sdk:

* a snapshot (model, optimizer, epoch, batch, global step) every SAVE_EVERY epochs, written atomically
  and reported to the control plane (``get-job`` shows it; victim choice prefers jobs that lose little);
* on SIGTERM (preemption, cancellation, node drain) every rank stops at the same step (an all-reduce of the
  flag), rank 0 saves a snapshot of exactly that step and all exit; the next run resumes from it;
* after a crash (a killed process or node) the job restarts from the last periodic snapshot: at most
  SAVE_EVERY epochs are redone.

Resuming is exact: the data order depends only on the epoch, and a run that starts mid-epoch skips the
batches done already, so an interrupted run ends with the same model as an undisturbed one.

Elastic (a fairpod job with --min-nodes/--max-nodes under ``torchrun --nnodes MIN:MAX --rdzv_backend c10d``):
when a node leaves, every rank stops at the same step and rank 0 snapshots it (as on a preemption), and the
workers whose own node stays exit 75 (REGROUP) so that their torchrun agent restarts them with the nodes that
stay; when a node joins, the agents stop the workers with SIGTERM and the new group resumes from the snapshot.
With a different world size the data is split differently, so such a run is not bit-identical.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from fairpod import sdk

REGROUP = 75  # exit code of a worker whose elastic group changes size (torchrun restarts the group)


class GeneratedDataset(Dataset):
    """``size`` samples of y = x . w + noise, x in R^20: the same for every rank and every run."""

    def __init__(self, size: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, 20, generator=g)
        w = torch.randn(20, 1, generator=g)
        self.y = self.x @ w + 0.01 * torch.randn(size, 1, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def make_model(hidden: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(20, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))


class Trainer:
    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.args = args
        self.device = device
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.dataset = GeneratedDataset(args.dataset_size, args.seed)
        self.sampler = DistributedSampler(self.dataset, shuffle=True, seed=args.seed)
        self.loader = DataLoader(self.dataset, batch_size=args.batch_size, sampler=self.sampler,
                                 pin_memory=device.type == "cuda")
        model = make_model(args.hidden, args.seed).to(device)
        self.optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
        self.epoch, self.batch, self.step = 0, 0, 0
        # an elastic fairpod job (--min-nodes/--max-nodes) under torchrun's elastic agent
        self.elastic = os.environ.get("FAIRPOD_MIN_NODES", "") != os.environ.get("FAIRPOD_MAX_NODES", "")
        self.snapshot = Path(args.checkpoint_path)
        if self.snapshot.exists():
            self._load(model)
        elif sdk.is_resuming():
            self.log(f"no snapshot at {self.snapshot}: starting from scratch")
        self.model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        self.started_at_step = self.step

    def log(self, msg: str) -> None:
        print(f"[RANK {self.rank}] {msg}", flush=True)

    def _load(self, model: torch.nn.Module) -> None:
        snap = torch.load(self.snapshot, map_location=self.device, weights_only=True)
        model.load_state_dict(snap["MODEL_STATE"])
        self.optimizer.load_state_dict(snap["OPTIMIZER_STATE"])
        self.epoch, self.batch, self.step = snap["EPOCHS_RUN"], snap["BATCH"], snap["STEP"]
        self.log(f"Resuming training from snapshot at Epoch {self.epoch} batch {self.batch} "
                 f"(step {self.step}, restart {sdk.restart_count()})")

    def save(self, why: str) -> None:
        """Rank 0 writes the snapshot atomically and reports it; every rank waits until it is written."""
        if self.rank == 0:
            state: dict[str, Any] = {
                "MODEL_STATE": self.model.module.state_dict(),
                "OPTIMIZER_STATE": self.optimizer.state_dict(),
                "EPOCHS_RUN": self.epoch, "BATCH": self.batch, "STEP": self.step,
            }  # fmt: skip
            with sdk.atomic_path(self.snapshot) as tmp:
                torch.save(state, tmp)
            sdk.report_progress(step=self.step, checkpoint=self.snapshot)
            self.log(f"Epoch {self.epoch} batch {self.batch} | Training snapshot saved at {self.snapshot} "
                     f"(step {self.step}, {why})")
        dist.barrier()

    def train(self, total_epochs: int) -> str:
        steps_per_epoch = len(self.loader)
        sdk.install_preemption_handler()
        t_step = time.monotonic()
        while self.epoch < total_epochs:
            self.sampler.set_epoch(self.epoch)
            self.log(f"Epoch {self.epoch} | Batchsize: {self.args.batch_size} | Steps: {steps_per_epoch}")
            for i, (x, y) in enumerate(self.loader):
                if i < self.batch:  # done before the snapshot this run resumed from
                    continue
                self.optimizer.zero_grad()
                loss = F.mse_loss(self.model(x.to(self.device)), y.to(self.device))
                loss.backward()
                self.optimizer.step()
                self.batch, self.step = i + 1, self.step + 1
                if self.args.min_step_seconds:  # a heavier model, at human speed (demos, tests)
                    time.sleep(max(0.0, self.args.min_step_seconds - (time.monotonic() - t_step)))
                t_step = time.monotonic()
                if self.args.log_every and self.step % self.args.log_every == 0 and self.rank == 0:
                    self.log(f"step {self.step} loss {loss.item():.6f}")
                if sdk.preemption_requested(sync=True):
                    self.save("preemption requested")
                    if self.elastic and not sdk.preemption_requested():
                        return "regroup"  # another node leaves (an elastic job shrinks); this one stays
                    return "preempted"
            self.epoch, self.batch = self.epoch + 1, 0
            if self.epoch % self.args.save_every == 0 or self.epoch == total_epochs:
                self.save(f"every {self.args.save_every} epochs" if self.epoch < total_epochs else "done")
        return "done"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Resumable DDP training of a small MLP on generated data.")
    p.add_argument("total_epochs", type=int, help="total epochs to train")
    p.add_argument("save_every", type=int, help="save a snapshot every N epochs")
    p.add_argument("--batch_size", type=int, default=32, help="batch size per rank (default 32)")
    p.add_argument("--checkpoint_path", default=None,
                   help="snapshot file (default: snapshot.pt in $FAIRPOD_CHECKPOINT_DIR, else ./snapshot.pt)")
    p.add_argument("--dataset_size", type=int, default=2048, help="samples (default 2048)")
    p.add_argument("--hidden", type=int, default=64, help="hidden width of the MLP (default 64)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                   help="auto: nccl when this node has a GPU for each of its processes, else gloo")
    p.add_argument("--log_every", type=int, default=0, help="rank 0 logs every N steps (0: per epoch only)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a collective may wait for a peer")
    p.add_argument("--min_step_seconds", type=float, default=0.0,
                   help="each step lasts at least this long (a stand-in for a heavier model; default 0)")
    args = p.parse_args(argv)
    if args.total_epochs < 1 or args.save_every < 1:
        p.error("total_epochs and save_every must be at least 1")
    if "RANK" not in os.environ or "LOCAL_RANK" not in os.environ:
        p.error("start me with torchrun (RANK and LOCAL_RANK are not set)")
    if args.checkpoint_path is None:
        base = os.environ.get("FAIRPOD_CHECKPOINT_DIR")
        args.checkpoint_path = str(Path(base) / "snapshot.pt") if base else "snapshot.pt"

    backend = args.backend
    if backend == "auto":  # nccl needs a GPU of its own for every process of this node
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= local else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    torch.set_num_threads(1)
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=args.timeout))
    t0 = time.monotonic()
    trainer = Trainer(args, device)
    outcome = trainer.train(args.total_epochs)
    ran = trainer.step - trainer.started_at_step
    trainer.log(f"{outcome} at step {trainer.step} (epoch {trainer.epoch}); this run trained {ran} steps "
                f"from step {trainer.started_at_step} in {time.monotonic() - t0:.1f}s on {backend} x {trainer.world}")
    # a node of an elastic job left: this node's workers exit non-zero, so that its torchrun agent restarts them
    # and they rendezvous again with the nodes that stay (torchrun --max-restarts counts these)
    return REGROUP if outcome == "regroup" else 0


if __name__ == "__main__":
    code = main()
    # The work is done and saved (every way out of train() ends with the snapshot's barrier). Leave without the
    # process group's teardown and the interpreter's: with gloo, torch's C++ threads of a group being torn down
    # while its peers exit can abort the process ("terminate called without an active exception", SIGABRT; seen
    # once on torch 2.13 with a run finished at its last step), and torchrun would report a finished run as failed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
