"""Gang readiness (Kueue's ``waitForPodsReady``, HyperPod's gang readiness timeout): an attempt whose replicas
are not all ready within a timeout of its start is stopped, its capacity given back, and requeued after an
exponential backoff; after ``policy.ready_requeue_limit`` timeouts it fails.

The timeout is the job's ``ready_timeout_seconds``, else ``policy.ready_timeout_seconds`` (null in both: no
check). A replica is ready when its process has started (the executor's :class:`fairpod.executors.base.Starting`
capability says so; an executor without it: once the attempt's start is recorded) or, for a job with
``ready_signal: sdk``, when it called :func:`fairpod.sdk.ready` (a progress report of the attempt counts for
every rank: the job trains). The check runs once a turn over the control plane's runs (in memory), only for
attempts not ready yet; once the gang is ready it is not looked at again (``Run.ready_at``).

The requeue: the job goes back to Pending with the same attempt (a readiness timeout is not the job's failure:
``max_retry`` is not spent), ``restart_not_before`` in its ``run_state`` holds it out of the engine's snapshot
(:mod:`fairpod.server.core.transitions.backoff`) for ``ready_backoff_base_seconds x 2^(k-1)`` (at most
``ready_backoff_max_seconds``), k counted from the job's ``JobNotReady`` events.
"""

from __future__ import annotations

from itertools import compress
from operator import attrgetter, ne
from typing import TYPE_CHECKING, Any

from fairpod.executors.base import Starting, capability
from fairpod.model.jobs import JobState
from fairpod.server.core.transitions import backoff
from fairpod.server.runs import STOP_FAIL, STOP_NOT_READY, Run, job_key
from fairpod.store.records import Job

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState

EVENT = "JobNotReady"


def timeout_of(cp: CoreState, job: Job) -> float | None:
    t = job.spec.ready_timeout_seconds
    return float(t) if t is not None else cp.spec.policy.ready_timeout_seconds


def not_ready(cp: CoreState, job: Job, run: Run) -> list[int]:
    """The ranks of the attempt that are not ready yet."""
    ranks = range(job.nodes)
    if job.spec.ready_signal == "sdk":
        if job.checkpoint_at is not None and job.started_at is not None and job.checkpoint_at >= job.started_at:
            return []  # it reports progress: it trains
        return [r for r in ranks if str(r) not in run.ready]
    starting = capability(cp.executor, Starting)
    if starting is None:
        return []  # launched and recorded: as far as this executor can tell, started
    started = starting.started_ranks(job_key(job), run.attempt)
    return [r for r in ranks if r not in started and str(r) not in run.exits]


class Readiness:
    """The keeper (after the turn's commit): stop and requeue attempts not ready in time. It remembers the
    attempts no timeout applies to (neither their job nor the policy sets one: the default), so that a turn reads
    from the store only the jobs it may act on, not every running job."""

    def __init__(self) -> None:
        self.unchecked: dict[int, int] = {}  # job id -> its attempt no timeout applies to (under ``policy``)
        self.policy: float | None = None  # the policy's timeout they were judged under

    def tick(self, cp: CoreState) -> None:
        now, policy = cp.clock(), cp.spec.policy.ready_timeout_seconds
        if policy != self.policy:  # judged under another policy: all of them again
            self.unchecked.clear()
            self.policy = policy
        for jid in self.unchecked.keys() - cp.runs.keys():
            del self.unchecked[jid]
        look = to_look(cp.runs, self.unchecked)
        cp.store.prefetch(jid for jid, _ in look)  # one query (after a restart: every live attempt at once)
        for jid, run in look:
            _check(cp, jid, run, now, self.unchecked)


def to_look(runs: dict[int, Run], unchecked: dict[int, int]) -> list[tuple[int, Run]]:
    """The attempts whose readiness is awaited and that are not judged yet (or were judged under another attempt),
    in the runs' order. The judged ones are nearly all of them (~30,000 at 10,000 nodes) and a Python pass over
    them cost ~25 ms a turn, so they are told apart in C (map, compress), without a tuple per attempt."""
    fresh = map(ne, map(unchecked.get, runs), map(attrgetter("attempt"), runs.values()))
    return [(jid, run) for jid, run in compress(runs.items(), fresh) if _awaited(run)]


def _awaited(run: Run) -> bool:
    """Is the attempt's readiness still to be seen (started, not ready yet, not stopping or restarting)?"""
    return run.ready_at is None and run.launched and run.stopping is None and not run.restart_due


def _check(cp: CoreState, jid: int, run: Run, now: float, unchecked: dict[int, int]) -> None:
    """One attempt whose readiness is awaited (``_awaited``): ready now (noted once), or past its timeout
    (stopped: requeued, or failed past the limit); an attempt no timeout applies to goes into ``unchecked``."""
    job = cp.store.get_job(jid)
    if job is None or job.state != JobState.RUNNING or job.started_at is None:
        return
    timeout = timeout_of(cp, job)
    if timeout is None:
        unchecked[jid] = run.attempt
        return
    missing = not_ready(cp, job, run)
    if not missing:
        run.ready_at = now
        cp.store.update_job(job.id, {"run_state": run.to_json()})
        return
    if now - job.started_at < timeout:
        return
    timeouts = len(cp.store.list_events(job_id=job.id, kind=EVENT, limit=None)) + 1
    limit = cp.spec.policy.ready_requeue_limit
    what = "started" if job.spec.ready_signal == "started" else "reported ready"
    why = (f"not ready: replica{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of "
           f"{job.nodes} not {what} within the readiness timeout of {timeout:g} s")
    gives_up = limit is not None and timeouts > limit
    then = (f"readiness timeout {timeouts} of at most {limit}: it fails" if gives_up
            else f"its capacity is given back and it is requeued (readiness timeout {timeouts})")
    cp.event(EVENT, f"job {job.name}: {why}; {then}", job, ranks=missing, timeout=timeout, count=timeouts)
    cp.begin_stop(job, run, STOP_FAIL if gives_up else STOP_NOT_READY, why)


def delay(cp: CoreState, job: Job) -> float:
    """The backoff before the job's requeue after its k-th readiness timeout."""
    p = cp.spec.policy
    k = max(1, len(cp.store.list_events(job_id=job.id, kind=EVENT, limit=None)))
    if p.ready_backoff_base_seconds <= 0:
        return 0.0
    return float(min(p.ready_backoff_max_seconds, p.ready_backoff_base_seconds * 2.0 ** min(k - 1, 60)))


def requeue_changes(cp: CoreState, job: Job, run_state: dict[str, Any], reason: str, now: float) -> dict[str, Any]:
    """What the transition to Pending adds after a readiness timeout: the backoff stored with the run."""
    wait = delay(cp, job)
    if wait <= 0:
        return {"reason": f"requeued: {reason}"}
    return {"run_state": {**run_state, backoff.KEY: now + wait},
            "reason": f"requeued: {reason}; backing off {wait:g} s"}


def mark_ready(cp: CoreState, job: Job, rank: int, attempt: int) -> bool:
    """A replica said it is ready (``fairpod.sdk.ready``); False when that attempt is not the live one."""
    run = cp.runs.get(job.id)
    if run is None or run.attempt != attempt or rank < 0 or rank >= job.nodes:
        return False
    if str(rank) not in run.ready:
        run.ready.append(str(rank))
        cp.store.update_job(job.id, {"run_state": run.to_json()})
    return True
