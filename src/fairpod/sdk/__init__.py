"""What a training script needs from fairpod: where to checkpoint, whether it resumes, when to stop, and a way
to tell the control plane about its last checkpoint. Standard library only; torch is used only when asked to
(``preemption_requested(sync=True)`` in a ``torch.distributed`` job).

Every function also works outside fairpod (run the script by hand): ``checkpoint_dir()`` falls back to
``./checkpoints``, ``restart_count()`` to 0, and ``report_progress`` does nothing and returns False.

A training loop::

    from fairpod import sdk

    ckpt = sdk.checkpoint_dir() / "model.pt"
    start = load(ckpt) if ckpt.exists() else 0          # sdk.is_resuming() says whether a run came before
    for step in range(start, total):
        train_one_step()
        if step % 100 == 0 or sdk.preemption_requested():
            save(ckpt, step)
            sdk.report_progress(step=step, checkpoint=ckpt)
            if sdk.preemption_requested():
                break                                      # exit within the grace period; fairpod resumes us

See docs/sdk.md for ``torch.save`` and ``torch.distributed.checkpoint`` examples.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = [
    "atomic_path",
    "checkpoint_dir",
    "in_fairpod",
    "install_preemption_handler",
    "is_resuming",
    "job_name",
    "last_checkpoint",
    "peer_restarts",
    "preemption_requested",
    "rank",
    "ready",
    "replica_restarts",
    "report_progress",
    "report_recovered",
    "restart_count",
]

_Handler = Callable[[int, FrameType | None], Any] | int | None

_preempted = threading.Event()
_installed = False
_previous: dict[int, _Handler] = {}
_warned = False


def in_fairpod() -> bool:
    """True inside a replica that fairpod started."""
    return "FAIRPOD_JOB" in os.environ


def job_name() -> str | None:
    """The job's name (``FAIRPOD_JOB_NAME``), None outside fairpod."""
    return os.environ.get("FAIRPOD_JOB_NAME") or None


def rank() -> int:
    """This process's global rank: ``RANK`` as torchrun or fairpod set it (0 if unset)."""
    return _int_env("RANK", 0)


def checkpoint_dir(default: str | os.PathLike[str] = "checkpoints") -> Path:
    """The job's checkpoint directory (``FAIRPOD_CHECKPOINT_DIR``): the same for every replica and every
    restart of the job; created if missing. Outside fairpod: ``default`` (relative to the working dir)."""
    path = Path(os.environ.get("FAIRPOD_CHECKPOINT_DIR") or default)
    path.mkdir(parents=True, exist_ok=True)
    return path


def restart_count() -> int:
    """How often the job was restarted after a failure (auto-resume): 0 on the first run."""
    return _int_env("FAIRPOD_RESTART_COUNT", _int_env("SLURM_RESTART_COUNT", 0))


def last_checkpoint() -> tuple[str | None, int | None]:
    """(path, step) of the last checkpoint the job reported before this run started, or (None, None)."""
    step = os.environ.get("FAIRPOD_LAST_STEP")
    return (os.environ.get("FAIRPOD_LAST_CHECKPOINT") or None,
            int(step) if step and step.lstrip("-").isdigit() else None)


def is_resuming() -> bool:
    """True when this run continues earlier work of the same job: after an auto-resume restart, or after a
    preemption of a job that had reported a checkpoint."""
    return restart_count() > 0 or last_checkpoint() != (None, None)


# -- preemption ------------------------------------------------------------------------------------------


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _preempted.set()
    prev = _previous.get(signum)
    if callable(prev):
        prev(signum, frame)


def install_preemption_handler() -> bool:
    """Catch SIGTERM (what fairpod sends before preemption, cancellation or a node drain) instead of dying
    of it, so the loop can save and exit within the grace period. Called by ``preemption_requested``;
    call it early yourself if SIGTERM could come before the first check. A handler installed before is
    still called. Returns False where handlers cannot be installed (not the main thread)."""
    global _installed
    if _installed:
        return True
    try:
        prev = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread of the main interpreter
        return False
    if prev not in (signal.SIG_DFL, signal.SIG_IGN, None, _on_sigterm):
        _previous[signal.SIGTERM] = prev
    _installed = True
    return True


def preemption_requested(sync: bool = False) -> bool:
    """True once this process got SIGTERM: save a checkpoint and exit within the grace period.

    With ``sync=True`` in a ``torch.distributed`` job, every rank gets the same answer (True if any rank got
    SIGTERM; an all-reduce, so every rank must call it at the same point of the loop): the ranks of a DDP
    job stop at the same step instead of one of them waiting forever in the next collective.
    """
    install_preemption_handler()
    local = _preempted.is_set()
    if not sync:
        return local
    return _agree(local)


def _agree(flag: bool) -> bool:
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return flag
    if not (dist.is_available() and dist.is_initialized()):
        return flag
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


# -- checkpoints -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Write a checkpoint file or directory under a temporary name and move it to ``path`` only when the
    block succeeds, so a kill in the middle never leaves a half-written checkpoint behind::

        with sdk.atomic_path(ckpt) as tmp:
            torch.save(state, tmp)
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    _remove(tmp)
    try:
        yield tmp
        if tmp.is_dir() and final.is_dir():  # os.replace cannot replace a non-empty directory
            old = final.with_name(f".{final.name}.old-{os.getpid()}")
            _remove(old)
            os.replace(final, old)
            os.replace(tmp, final)
            _remove(old)
        else:
            os.replace(tmp, final)
    finally:
        _remove(tmp)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def report_progress(
    step: int | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    *,
    any_rank: bool = False,
    timeout: float = 5.0,
    strict: bool = False,
    next_checkpoint_in: float | None = None,
) -> bool:
    """Tell the control plane the job's progress: ``step``, and ``checkpoint`` (a path) when one was just
    written. The control plane records when (its ``get-job`` shows it) and, when it must preempt, prefers
    the job that loses the least work since its last checkpoint.

    Only rank 0 reports (``RANK`` unset counts as 0) unless ``any_rank``. Returns True when the report
    was accepted. It never interrupts training: outside fairpod it does nothing, and when the control
    plane cannot be reached it warns once on stderr and returns False (``strict=True`` raises instead).
    """
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    if not any_rank and rank() != 0:
        return False
    url, token, job = (os.environ.get("FAIRPOD_API_URL"), os.environ.get("FAIRPOD_TOKEN"),
                       os.environ.get("FAIRPOD_JOB_ID"))
    if not (url and token and job):
        if strict:
            raise RuntimeError("not running as a fairpod job with a control plane to report to "
                               "(FAIRPOD_API_URL, FAIRPOD_TOKEN and FAIRPOD_JOB_ID are not all set)")
        return False
    body: dict[str, Any] = {"step": step}
    if next_checkpoint_in is not None:  # a preemption may wait this long for it (policy)
        body["next_checkpoint_in"] = float(next_checkpoint_in)
    if checkpoint is not None:
        body["checkpoint"] = str(Path(checkpoint).absolute())
    data = json.dumps(body).encode()
    # several control planes (fairpod up --ha): each address in turn, and the leader a standby names
    urls = [u.strip().rstrip("/") for u in url.split(",") if u.strip()]
    msg = "no address"
    for _ in range(len(urls) + 1):
        if not urls:
            break
        base = urls.pop(0)
        req = urllib.request.Request(
            f"{base}/api/v1/jobs/{job}/progress", data=data, method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - the URL fairpod gave us
                r.read()
            return True
        except urllib.error.HTTPError as e:
            msg = f"HTTP {e.code}: {_detail(e)}"
            leader = e.headers.get("X-Fairpod-Leader") if e.code == 503 else None
            if leader is None:
                break
            urls.insert(0, leader)
        except (urllib.error.URLError, OSError) as e:
            msg = str(getattr(e, "reason", e))
    if strict:
        raise RuntimeError(f"fairpod: could not report progress: {msg}")
    _warn_once(f"fairpod: could not report progress to {url} ({msg}); training goes on")
    return False


# -- resilience: gang readiness, restarts in place (docs/resilience.md) -----------------------------------


def _call(method: str, path: str, body: dict[str, Any] | None, timeout: float) -> dict[str, Any] | None:
    """A call of the job's own routes with its token; None outside fairpod or when the server cannot be reached
    (warned once on stderr: training goes on)."""
    url, token, job = (os.environ.get("FAIRPOD_API_URL"), os.environ.get("FAIRPOD_TOKEN"),
                       os.environ.get("FAIRPOD_JOB_ID"))
    if not (url and token and job):
        if url:  # in a replica, without its credentials: said, not silently taken for "outside fairpod"
            missing = " and ".join(n for n, v in (("FAIRPOD_TOKEN", token), ("FAIRPOD_JOB_ID", job)) if not v)
            _warn_once(f"fairpod: {missing} not set, {url} not asked; training goes on")
        return None
    req = urllib.request.Request(
        f"{url.rstrip('/')}/api/v1/jobs/{job}/{path}", method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - the URL fairpod gave us
            answer = json.loads(r.read().decode() or "{}")
            return answer if isinstance(answer, dict) else {}
    except urllib.error.HTTPError as e:
        msg = f"HTTP {e.code}: {_detail(e)}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        msg = str(getattr(e, "reason", e))
    _warn_once(f"fairpod: could not reach {url} ({msg}); training goes on")
    return None


def ready(timeout: float = 5.0) -> bool:
    """Tell the control plane this replica is ready (its data loaded, its group formed): for jobs submitted with
    ``ready_signal: sdk`` (``--ready-signal sdk``) an attempt whose replicas have not all said so within its
    readiness timeout is stopped and requeued. Every rank calls it. True when it was taken."""
    return _call("POST", "ready", {"rank": rank(), "attempt": restart_count()}, timeout) is not None


def peer_restarts(timeout: float = 5.0) -> int:
    """How many replicas of this attempt were restarted in place so far (0 outside fairpod or when the server
    cannot be reached). A rank that sees it grow knows a peer came back: it re-forms its process group (a
    torchrun-elastic agent does so by itself; a plain DDP program destroys and re-initialises it)."""
    answer = _call("GET", "restarts", None, timeout)
    return int(answer.get("generation", 0)) if answer else 0


def report_recovered(ranks: list[int], source: int, step: int, seconds: float, state_bytes: int = 0,
                     timeout: float = 5.0) -> bool:
    """Tell the control plane that ``ranks`` (replaced in place) were given the state of rank ``source`` at
    ``step`` from its memory, ``seconds`` after the fault (a ``ReplicaRecovered`` event; goodput keeps the work).
    Called by :class:`fairpod.sdk.peers.PeerRecovery`; False outside fairpod or when it was not taken."""
    body = {"ranks": [int(r) for r in ranks], "source": int(source), "step": int(step),
            "seconds": round(float(seconds), 3), "state_bytes": int(state_bytes)}
    return _call("POST", "recovered", body, timeout) is not None


def replica_restarts() -> int:
    """How often this replica was restarted in place within its attempt (``FAIRPOD_REPLICA_RESTARTS``; 0 at
    first)."""
    return _int_env("FAIRPOD_REPLICA_RESTARTS", 0)


def _detail(e: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(e.read().decode()).get("detail") or e.reason)
    except (ValueError, OSError, AttributeError):
        return str(e.reason)


def _warn_once(msg: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        print(msg, file=sys.stderr, flush=True)


def _int_env(name: str, default: int) -> int:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return default
