"""Goodput: of the accelerator-seconds a job's attempts held, those that produced progress it kept, and those lost
(work since its last checkpoint when the attempt, or a replica of it, was stopped), by cause.

Each time work is given up the control plane writes a ``Goodput`` event with the figures (:func:`span_event`): when
an attempt ends (preempted, restarted, failed, cancelled, requeued after a readiness timeout, or finished) and
when a replica is restarted in place (the job goes back to its checkpoint; the attempt goes on). Work is counted
from the attempt's start, or the last restart in place (``Run.good_from``), to the end: a finished attempt keeps
it all; otherwise what came before the job's last checkpoint in that span (``fairpod.sdk.report_progress(step,
checkpoint=...)``) is kept and the rest is lost. A job that never reports a checkpoint loses all of an attempt
that does not finish.

Causes: ``preemption`` (also a runtime limit that requeues), ``failure`` (a replica exited non-zero, a node
fault, could not start), ``restart`` (in place, or a restart a log rule asked for), ``readiness`` (a readiness
timeout), ``hang``, ``cancelled``. ``get-job``, ``report usage``, the metrics (``fairpod_goodput_*``), the
dashboard and ``fairpod simulate`` show them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fairpod.server.runs import STOP_CANCEL, STOP_NOT_READY, STOP_PREEMPT, Run
from fairpod.store.records import Job

EVENT = "Goodput"
CAUSES = ("preemption", "failure", "restart", "readiness", "hang", "cancelled")


def cause_of(kind: str | None, reason: str) -> str:
    """The cause of lost work for a stop of ``kind`` (``server.runs.STOP_*``) with ``reason``."""
    if kind == STOP_PREEMPT:
        return "preemption"
    if kind == STOP_NOT_READY:
        return "readiness"
    if kind == STOP_CANCEL:
        return "cancelled"
    if reason.startswith("hung:"):
        return "hang"
    if reason.startswith("log rule") or "log rule" in reason.split(";")[0]:
        return "restart"
    return "failure"


def split(start: float, end: float, checkpoint: float | None, done: bool) -> tuple[float, float]:
    """(kept, lost) seconds of the span ``start``..``end``: all kept when ``done``, else up to the checkpoint."""
    span = max(0.0, end - start)
    if done:
        return span, 0.0
    kept = min(span, max(0.0, checkpoint - start)) if checkpoint is not None else 0.0
    return kept, span - kept


def counted(job: Job, run: Run) -> bool:
    """Does the attempt hold a span to account for (its replicas were launched and the job started)?"""
    return run.launched and job.started_at is not None


def span_event(job: Job, run: Run, cause: str | None, now: float, *,
               restart_in_place: bool = False) -> tuple[str, dict[str, Any]] | None:
    """The ``Goodput`` event (message, data) of the span of a :func:`counted` attempt that ends at ``now``
    (``cause`` None: the attempt finished its work); None when it held no accelerator-seconds. The control plane
    writes it and starts the next span at ``now`` (``fairpod.server.core.transitions.goodput_spans.account``)."""
    acc = job.acc * max(1, len(job.placement) or job.nodes)
    start = max(float(job.started_at or 0.0), float(run.good_from or 0.0))
    kept, lost = split(start, now, job.checkpoint_at, cause is None)
    if acc <= 0 or kept + lost <= 0:
        return None
    lost_acc = lost * acc
    what = ("restart in place" if restart_in_place else f"attempt {run.attempt}")
    tail = f", {lost_acc:.0f} lost to {cause}" if cause is not None else ""
    return (f"job {job.name} {what}: {kept * acc:.0f} accelerator-seconds kept{tail}",
            {"attempt": run.attempt, "kept": round(kept * acc, 3), "lost": round(lost_acc, 3), "cause": cause or ""})


def recovered_event(job: Job, run: Run, fault_at: float, now: float) -> tuple[str, dict[str, Any]] | None:
    """The ``Goodput`` event of a span that ends with a replica recovered from a peer's memory: the work up to the
    fault is kept, the time from the fault to ``now`` (every replica waited) is lost to ``restart``; nothing is
    redone. None when it held no accelerator-seconds."""
    acc = job.acc * max(1, len(job.placement) or job.nodes)
    start = max(float(job.started_at or 0.0), float(run.good_from or 0.0))
    kept, lost = max(0.0, min(fault_at, now) - start), max(0.0, now - max(start, fault_at))
    if acc <= 0 or kept + lost <= 0:
        return None
    return (f"job {job.name} recovery from peers: {kept * acc:.0f} accelerator-seconds kept, {lost * acc:.0f} lost "
            "to restart", {"attempt": run.attempt, "kept": round(kept * acc, 3), "lost": round(lost * acc, 3),
                           "cause": "restart"})


def summarize(events: list[Any], live: float = 0.0) -> dict[str, Any]:
    """The figures of ``Goodput`` events (those of a job, a team or the cluster): accelerator-seconds kept and lost
    by cause, and goodput (kept / all, None without any); ``live``: the running attempts' seconds not counted yet."""
    kept = 0.0
    lost = dict.fromkeys(CAUSES, 0.0)
    for e in events:
        d = e.data or {}
        kept += float(d.get("kept") or 0.0)
        c = str(d.get("cause") or "")
        if c:
            lost[c] = lost.get(c, 0.0) + float(d.get("lost") or 0.0)
    total = kept + sum(lost.values())
    return {"kept_accelerator_seconds": round(kept, 3),
            "lost_accelerator_seconds": {k: round(v, 3) for k, v in lost.items()},
            "running_accelerator_seconds": round(live, 3),
            "goodput": round(kept / total, 4) if total > 0 else None}


def of_job(job: Job, list_events: Callable[..., list[Any]], run: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """A job's goodput (``get-job``), of its ``Goodput`` events (read with ``list_events``) and its live attempt
    (``run``: its state, None without one). A job that never started has no ``Goodput`` event: no read (the answer
    to every submit shows its goodput)."""
    never = job.first_started_at is None and job.started_at is None and job.attempt == 0
    events = [] if never else list_events(job_id=job.id, kind=EVENT, limit=None)
    live = 0.0
    if run is not None and run.get("launched") and job.started_at is not None:
        live = max(0.0, now - max(float(job.started_at), float(run.get("good_from") or 0.0))) * job.acc * job.nodes
    return summarize(events, live)


def by_team(events: list[Any]) -> dict[str, dict[str, Any]]:
    """Goodput per team of ``events``, and the cluster's under ``"*"``."""
    teams: dict[str, list[Any]] = {}
    for e in events:
        teams.setdefault(e.team or "(none)", []).append(e)
    out = {t: summarize(evs) for t, evs in sorted(teams.items())}
    out["*"] = summarize(events)
    return out
