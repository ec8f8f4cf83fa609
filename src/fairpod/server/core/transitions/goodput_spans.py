"""The ``Goodput`` event of a span of work that ends (an attempt, or the time since the last restart in place):
:mod:`fairpod.server.accounting.goodput` works the figures out, purely; this writes them and starts the next span."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairpod.server.accounting import goodput
from fairpod.server.runs import Run
from fairpod.store.records import Job

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState


def account(cp: CoreState, job: Job, run: Run, cause: str | None, *, restart_in_place: bool = False) -> None:
    """Write the ``Goodput`` event of the span that ends now (``cause`` None: the attempt finished its work)."""
    if not goodput.counted(job, run):
        return
    now = cp.clock()
    event = goodput.span_event(job, run, cause, now, restart_in_place=restart_in_place)
    run.good_from = now
    if event is not None:
        cp.event(goodput.EVENT, event[0], job, **event[1])


def recovered(cp: CoreState, job: Job, run: Run, fault_at: float) -> None:
    """The span that ends with a replica recovered from a peer's memory (``restarts.recovered``)."""
    if not goodput.counted(job, run):
        return
    now = cp.clock()
    event = goodput.recovered_event(job, run, fault_at, now)
    run.good_from = now
    if event is not None:
        cp.event(goodput.EVENT, event[0], job, **event[1])
