"""Recovery from peers: a data-parallel job whose replica failed goes on from the step it was at, with the state
of a healthy replica, instead of every replica going back to the last checkpoint (docs/sdk.md, "Recovery from
peers"; HyperPod's checkpointless training, torchft's per-step fault tolerance).

Built on torch's own primitives (``torch.distributed`` with gloo or nccl), not on ``torchft``: see docs/resilience.md
for why. The job runs with ``--peer-recovery`` (and ``--restarts-in-place N``): when a replica fails, fairpod starts
only that one again on its node; the other replicas keep their processes. Each of them meets the failure as an
error of a collective (gloo: the dead peer's sockets close; nccl: the group's timeout), and then, in
:meth:`PeerRecovery.recover`:

1. waits until fairpod has started the replacement (the attempt's restart generation, ``sdk.peer_restarts()``,
   grows past the one this group was formed in) and until every rank of that generation has come to its
   rendezvous, ``MASTER_ADDR:MASTER_PORT`` with the generation as a key prefix (rank 0 hosts that store; a replaced
   rank 0 hosts it again on the same port): both as long as ``start_timeout``, for a replacement's start is its
   node's business (a cold interpreter importing torch on a busy host took 77 s, measured);
2. forms a new process group of the same size over that rendezvous, within ``timeout``;
3. agrees on the highest completed step; the lowest rank at that step sends its model, optimizer and
   ``extra`` state from memory (one broadcast) to every rank behind it, the replacement first among them;
4. tells the control plane (a ``ReplicaRecovered`` event with the reason, and goodput keeps the work).

The step that was in flight when the peer failed is done again by all; nothing else is redone. A replacement
starts its process the same way: it joins the generation fairpod started it in and receives the state. When the
replacement does not come within ``start_timeout`` or the group cannot be formed within ``timeout`` (a second
replica lost, fairpod restarting the job whole instead), :class:`RecoveryFailed` is raised: let the program exit
non-zero, and the job takes the checkpoint path.

Only ``torch`` is imported, and only here; ``fairpod.sdk`` itself stays standard library.
"""

from __future__ import annotations

import datetime
import io
import os
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from fairpod import sdk

__all__ = ["PeerRecovery", "RecoveryFailed", "peer_errors"]


# the address of the node a replica runs on, set by executors whose nodes are other hosts (the Ray executor's node
# agents: fairpod.executors.ray_node.NODE_ADDRESS_ENV)
NODE_ADDRESS_ENV = "FAIRPOD_NODE_ADDRESS"
GLOO_ON_NODE = "fairpod_gloo"  # the name gloo bound to that address is registered under (torch.distributed)


class RecoveryFailed(RuntimeError):
    """The group could not be formed again: exit non-zero, the job restarts from its checkpoint."""


def peer_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a collective raises when a peer is lost (gloo: closed connections; nccl: a timeout or an
    aborted communicator)."""
    errs: list[type[BaseException]] = [RuntimeError]
    base = getattr(dist, "DistError", None)
    if isinstance(base, type):
        errs.append(base)
    return tuple(errs)


def _gloo_on_node() -> str:
    """The name of a torch.distributed backend that is gloo with its sockets on this node's address
    (``FAIRPOD_NODE_ADDRESS``), registered once per process.

    gloo's own default device is the address the host's name resolves to: on a Ray node that may be a loopback
    address (Debian maps the host name to 127.0.1.1) or another interface than the one its peers reach it on, and
    a replica started again there would then not be reached by the survivors. gloo takes no address through
    ``init_process_group``, hence a backend of our own that makes the group as gloo with that device."""
    if GLOO_ON_NODE not in dist.Backend.backend_list:
        def make(store: dist.Store, rank: int, size: int, timeout: datetime.timedelta) -> Any:
            opts = dist.ProcessGroupGloo._Options()
            opts._devices = [dist.ProcessGroupGloo.create_device(hostname=os.environ[NODE_ADDRESS_ENV])]
            opts._timeout = timeout
            return dist.ProcessGroupGloo(store, rank, size, opts)

        dist.Backend.register_backend(GLOO_ON_NODE, make, devices=["cpu"])
    return GLOO_ON_NODE


class PeerRecovery:
    """The process group of a data-parallel job, formed so that a lost replica can be replaced and given a peer's
    state::

        rec = PeerRecovery(model, optimizer, backend="gloo")   # a replacement receives state here
        ddp = rec.wrap(model)                                   # DistributedDataParallel over the live group
        while rec.step < total:
            try:
                optimizer.zero_grad(); loss_of(ddp, rec.step).backward(); optimizer.step()
                rec.step += 1
            except rec.errors:
                ddp = rec.recover()                             # a peer was lost: the step is done again

    ``extra``: more state to hand over (a dict of picklable values or tensors, kept in ``rec.extra``).
    ``timeout``: seconds a collective and the forming of the new group may take each.
    ``start_timeout``: seconds the wait for the replacement may take: for fairpod to start it and for its process
    to reach the rendezvous (torch elastic's ``join_timeout`` is 600 s too). While a rank waits, a generation that
    grows again (the replacement itself lost and started anew) is followed.
    """

    errors: tuple[type[BaseException], ...] = peer_errors()

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, backend: str = "gloo",
                 timeout: float = 60.0, start_timeout: float = 600.0, extra: dict[str, Any] | None = None,
                 generation: Callable[[], int] | None = None) -> None:
        self.model, self.optimizer, self.backend, self.timeout = model, optimizer, backend, timeout
        self.start_timeout = max(start_timeout, timeout)
        self.extra: dict[str, Any] = dict(extra or {})
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.host = os.environ.get("MASTER_ADDR", "127.0.0.1")
        self.port = int(os.environ.get("MASTER_PORT", "29500"))
        self._generation = generation or sdk.peer_restarts
        self.replaced = sdk.replica_restarts() > 0
        self.gen = int(os.environ.get("FAIRPOD_RESTART_GENERATION", "0") or 0) if self.replaced else 0
        self.step = 0
        self.recoveries = 0
        self.last: dict[str, Any] = {}  # the last recovery: seconds, source rank, step
        self._server: dist.TCPStore | None = None
        self._retired: list[Any] = []  # the process groups of the generations before (see _form)
        self._ddp_args: dict[str, Any] = {}
        # a replacement's start (wall-clock times): here (its imports done), its group formed, the state received
        self.phases: dict[str, float] = {"ready": time.time()}
        self._form()
        self.phases["group"] = time.time()
        if self.replaced:  # a replacement: the survivors wait in recover() for it; get the state from one of them
            self._sync(time.monotonic(), "replaced")
            self.phases["state"] = time.time()

    # -- the group --------------------------------------------------------------------------------------------

    def _store(self, deadline: float) -> dist.Store:
        """The rendezvous of the current generation. A rank other than 0 connects to rank 0's store, waiting for it
        until ``deadline`` (a replaced rank 0 starts it again when its own imports are done)."""
        if self.rank == 0:
            if self._server is None:  # rank 0 hosts the rendezvous for every generation it lives through
                self._server = dist.TCPStore(self.host, self.port, self.world, is_master=True,
                                             timeout=datetime.timedelta(seconds=self.timeout),
                                             wait_for_workers=False)
            base: dist.Store = self._server
        else:
            wait = datetime.timedelta(seconds=max(1.0, deadline - time.monotonic()))
            base = dist.TCPStore(self.host, self.port, self.world, is_master=False, timeout=wait)
            base.set_timeout(datetime.timedelta(seconds=self.timeout))
        return dist.PrefixStore(f"fairpod-peers/{self.gen}/", base)

    def _arrive(self, deadline: float) -> dist.Store:
        """Come to the rendezvous of the current generation and wait there until every rank has come (a rank
        still importing torch is not yet a failure); then its store. A generation that grows meanwhile (another
        replacement, a replaced rank 0 hosting the rendezvous anew) is followed: this rank comes to that one's."""
        keys = [f"arrived/{r}" for r in range(self.world)]
        came: list[int] = []
        while time.monotonic() < deadline:
            try:
                store = self._store(deadline)
                store.set(keys[self.rank], "1")
                while time.monotonic() < deadline:
                    try:
                        store.wait(keys, datetime.timedelta(seconds=1))
                        return store
                    except self.errors:
                        came = [r for r, k in enumerate(keys) if store.check([k])]
                        if self._follow():
                            break
            except self.errors:  # rank 0's store gone (rank 0 lost): its replacement hosts the next generation's
                if not self._follow():
                    time.sleep(0.5)
        raise RecoveryFailed(f"rank {self.rank}: not every rank came to the rendezvous of generation {self.gen} "
                             f"within {self.start_timeout:g} s (came: {came or 'unknown'})")

    def _follow(self) -> bool:
        """Whether fairpod started another replacement since this generation (then this rank moves to it)."""
        gen = self._generation()
        if gen > self.gen:
            self.gen = gen
            return True
        return False

    def _form(self, deadline: float | None = None) -> None:
        if dist.is_initialized():
            # The old group is broken: abort it, so that the work still queued in it (DDP's other gradient buckets
            # of the failed step) fails at once instead of waiting out the timeout for a peer that has moved on.
            # And keep it: its worker threads, as they drop a finished work, may take the GIL; the group's
            # destructor joins them, and it runs, with the GIL held, where the program drops its old DDP (``ddp =
            # rec.recover()``). A survivor whose old group went then deadlocked for good (seen with rank 0 lost:
            # the main thread in ~ProcessGroupGloo's join, the worker waiting for the GIL). Kept, it is dropped
            # at the process's end, its threads long idle. One per recovery.
            old = dist.group.WORLD
            self._retired.append(old)
            for end in (lambda: old.abort(), dist.destroy_process_group):  # type: ignore[union-attr]
                try:
                    end()
                except Exception:  # noqa: BLE001 - what is left of it goes
                    pass
        store = self._arrive(time.monotonic() + self.start_timeout if deadline is None else deadline)
        backend = self.backend
        if backend == "gloo" and os.environ.get(NODE_ADDRESS_ENV):
            backend = _gloo_on_node()
        dist.init_process_group(backend, store=store, rank=self.rank, world_size=self.world,
                                timeout=datetime.timedelta(seconds=self.timeout))

    def wrap(self, model: torch.nn.Module | None = None, **ddp_args: Any) -> torch.nn.Module:
        """``DistributedDataParallel`` of the model over the live group (again after each :meth:`recover`).

        ``find_unused_parameters`` is True unless given: DDP otherwise rebuilds its gradient buckets after its
        first step, and a DDP made again after a recovery would reduce that first step in another order, so the
        model would differ from an undisturbed run's in the last bits (measured: 2.4e-7 after 40 steps)."""
        from torch.nn.parallel import DistributedDataParallel as DDP

        self._ddp_args = ddp_args or self._ddp_args or {"find_unused_parameters": True}
        return DDP(model or self.model, **self._ddp_args)

    # -- recovery ---------------------------------------------------------------------------------------------

    def recover(self) -> torch.nn.Module:
        """A collective failed because a peer was lost: wait for its replacement, form the group again, bring
        every rank behind to the most advanced one's state; returns the model wrapped again (:meth:`wrap`)."""
        t0 = time.monotonic()
        deadline = t0 + self.start_timeout
        while True:
            gen = self._generation()
            if gen > self.gen:
                break
            if time.monotonic() > deadline:
                raise RecoveryFailed(f"rank {self.rank}: no replacement of the lost replica within "
                                     f"{self.start_timeout:g} s (restart generation still {gen})")
            time.sleep(0.05)
        self.gen = gen
        try:
            self._form(deadline)
            self._sync(t0, "survivor")
        except RecoveryFailed:
            raise
        except self.errors as e:
            raise RecoveryFailed(f"rank {self.rank}: the group could not be formed again in generation "
                                 f"{self.gen}: {e}") from e
        return self.wrap()

    def _sync(self, t0: float, role: str) -> None:
        """Agree on the most advanced rank; it sends its state to every rank behind it."""
        mine = -1 if role == "replaced" else self.step
        dev = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")
        steps = torch.tensor([mine], dtype=torch.int64, device=dev)
        gathered = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in range(self.world)]
        dist.all_gather(gathered, steps)
        all_steps = [int(t.item()) for t in gathered]
        best = max(all_steps)
        src = all_steps.index(best)
        if best < 0:
            raise RecoveryFailed("no rank holds any state to recover from")
        payload = torch.zeros(0, dtype=torch.uint8)
        if self.rank == src:
            buf = io.BytesIO()
            torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                        "step": self.step, "extra": self.extra}, buf)
            payload = torch.frombuffer(bytearray(buf.getbuffer()), dtype=torch.uint8)
        size = torch.tensor([payload.numel()], dtype=torch.int64, device=dev)
        dist.broadcast(size, src)
        if self.rank != src:
            payload = torch.empty(int(size.item()), dtype=torch.uint8)
        wire = payload.to(dev)
        dist.broadcast(wire, src)
        behind = [r for r, s in enumerate(all_steps) if s < best]
        if self.rank in behind:
            where = next((p.device for p in self.model.parameters()), torch.device("cpu"))
            state = torch.load(io.BytesIO(wire.cpu().numpy().tobytes()), map_location=where, weights_only=True)
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.step, self.extra = int(state["step"]), dict(state["extra"])
        self.recoveries += 1
        seconds = time.monotonic() - t0
        self.last = {"seconds": seconds, "source": src, "step": best, "behind": behind,
                     "bytes": int(size.item()), "generation": self.gen}
        if self.rank == src:  # one report per recovery, by the rank that gave its state
            sdk.report_recovered(ranks=[r for r, s in enumerate(all_steps) if s < 0] or behind, source=src,
                                 step=best, seconds=seconds, state_bytes=int(size.item()))
