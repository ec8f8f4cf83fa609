"""Group commit of submits: the submits that arrive together are written in one transaction under one hold
of the control plane's lock.

Each submit validates its job first (no lock), then joins the queue and waits for the lock. Whoever gets the
lock first writes every queued submit, its own and those of the threads still waiting behind it, in one
transaction (``transitions.submit._commit_submits``); a thread that finds its submit already written takes its
answer and lets the lock go at once. Every submit still answers only after its own rows are committed, and
the engine's queue learns of a job only after that commit. A name already taken fails only that submit
(the group is written again one by one); any other failed write fails every submit of the group, and the
control plane's memory is rebuilt from the store as after any failed write (``_change()``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from fairpod.model.jobs import JobSpec
from fairpod.model.spec import ClusterSpec
from fairpod.store.records import Job


@dataclass(eq=False, slots=True)
class Submit:
    """One queued submit: what was asked and, once written, its answer (``job`` or ``error``)."""

    spec: JobSpec
    actor: str
    key: str | None
    cluster: ClusterSpec  # the cluster spec ``checked`` was made against
    checked: Any  # ResolvedJob, or the InvalidJob / NeverFits to raise
    job: Job | None = None
    error: BaseException | None = None
    done: bool = False
    created: bool = False  # a new job (not the answer to a repeated idempotency key)


class SubmitQueue:
    """The submits waiting for the lock, in arrival order."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._queue: list[Submit] = []
        self.commits = 0  # transactions of submits committed (a group is one; after a taken name, one each)
        self.written = 0  # submits answered by them

    def add(self, s: Submit) -> None:
        with self._mu:
            self._queue.append(s)

    def take(self) -> list[Submit]:
        """Everything queued so far (the caller holds the control plane's lock)."""
        with self._mu:
            group, self._queue = self._queue, []
        return group

    def __len__(self) -> int:
        with self._mu:
            return len(self._queue)
