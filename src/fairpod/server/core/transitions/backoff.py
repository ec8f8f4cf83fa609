"""Restart backoff: an auto-resume restart after the job's own failure (a replica exited non-zero) waits
before the job may run again, exponentially longer each time, as Kueue's requeuing backoff and HyperPod's
restart policy do. A crash loop (a missing ``train.py``) then spends its retries over minutes, not within one
second, and does not churn the nodes meanwhile.

The rule: restart k (1, 2, …) of a job waits ``policy.restart_backoff_base_seconds x 2^(k-1)`` seconds, at most
``policy.restart_backoff_max_seconds``; a base of 0 restarts at once. Restarts for a node fault or a hang are
not delayed (the job did nothing wrong; it restarts on healthy nodes).

The waiting job is Pending in the store with ``restart_not_before`` in its ``run_state``, and is kept out of
the engine's snapshot (``cp.restart_holds``) until then; each reconcile turn lets in those whose time came.
The holds are rebuilt from the store with the snapshot, so they survive a restart of the control plane.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fairpod.model.jobs import JobState
from fairpod.server.runs import to_engine
from fairpod.store.records import EngineJob, Job

if TYPE_CHECKING:
    from fairpod.model.spec import Policy
    from fairpod.server.core.state import CoreState

KEY = "restart_not_before"


def delay(policy: Policy, restart: int, stop_reason: str | None) -> float:
    """Seconds restart number ``restart`` (1 for the first) waits; 0 for restarts that are not the job's fault."""
    base = policy.restart_backoff_base_seconds
    if base <= 0 or restart < 1 or not (stop_reason or "").startswith("replica "):
        return 0.0
    return float(min(policy.restart_backoff_max_seconds, base * 2.0 ** min(restart - 1, 60)))


def restart_changes(policy: Policy, job: Job, run_state: dict[str, Any], stop_reason: str | None,
                    now: float) -> dict[str, Any]:
    """What the transition to Pending adds for a restart that backs off: the time stored with the run and the
    reason; nothing when it does not wait."""
    wait = delay(policy, job.attempt + 1, stop_reason)
    if wait <= 0:
        return {}
    return {"run_state": {**run_state, KEY: now + wait},
            "reason": f"restarting: {stop_reason}; backing off {wait:g} s before restart {job.attempt + 1} "
                      f"of {job.max_retry}"}


def not_before(job: Job | EngineJob) -> float | None:
    t = (job.run_state or {}).get(KEY)
    return float(t) if isinstance(t, int | float) else None


def hold(cp: CoreState, job: Job | EngineJob) -> bool:
    """Keep ``job`` (Pending again) out of the snapshot while its backoff runs; True if it is held."""
    t = not_before(job)
    if job.state != JobState.PENDING or t is None or t <= cp.clock():
        return False
    cp.restart_holds[job.id] = t
    return True


def hold_back(cp: CoreState, jobs: list[EngineJob]) -> None:
    """After the snapshot was (re)built from ``jobs`` (the unfinished ones): take out of it the jobs whose
    restart backoff has not run out."""
    cp.restart_holds = {}
    for job in jobs:
        if hold(cp, job) and to_engine(job.id) in cp.snap.pending:
            cp.snap.remove_pending(to_engine(job.id))


def release(cp: CoreState) -> None:
    """Let in the jobs whose backoff ran out (each reconcile turn, under ``cp.lock``)."""
    if not cp.restart_holds:
        return
    now = cp.clock()
    for jid, t in list(cp.restart_holds.items()):
        if t > now:
            continue
        del cp.restart_holds[jid]
        job = cp.store.get_job(jid)
        if job is not None and job.state == JobState.PENDING and to_engine(jid) not in cp.snap.pending:
            cp.snap.add_pending(cp.workload(job))
