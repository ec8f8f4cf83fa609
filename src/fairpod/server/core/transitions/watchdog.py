"""Runtime limits and hang detection: once a second the reconcile loop looks at every running job.

Runtime limit (``max_runtime_seconds`` of the job, else its priority class's ``default_max_runtime_seconds``, at
most the class's ``max_runtime_seconds``): when the current attempt has run that long the job gets SIGTERM, its
grace period, and ends ``Failed`` with reason "runtime limit …", or — when the class says
``on_runtime_limit: requeue`` — goes back to its queue to resume from its checkpoint.

Hang (``hang_timeout_seconds``): a job is hung when, for that long, it sent no progress report (``fairpod.sdk``)
and none of its replicas wrote output, or — on real GPUs of this host — every GPU it holds sat at 0 %
utilization. ``hang_action`` says what follows: ``notify`` (a ``JobHung`` event, once until the job shows life
again), ``restart`` (the attempt is stopped and started again; it counts against ``max_retry``, and without
retries left the job fails) or ``cancel``. Each event names the signal that fired.

Regroup after a shrink (``policy.elastic_regroup_timeout_seconds``, for elastic jobs without a hang timeout of
their own): when an elastic job shrinks, the replicas left re-form their group (torchrun's re-rendezvous); one
that waits on a replica that left can wait for ever while the job looks Running. So after a shrink the job must
show life again within that timeout: a progress report when it sends them, else output. Otherwise it is hung,
and ``hang_action`` applies as above.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import compress, repeat
from operator import and_, attrgetter, is_, itemgetter, ne

from sqlalchemy import select

from fairpod.executors.base import HostGpus, capability
from fairpod.model.jobs import JobState
from fairpod.server.core.state import CoreState
from fairpod.server.core.transitions import stop
from fairpod.server.runs import STOP_CANCEL, STOP_FAIL, STOP_PREEMPT, STOP_RESTART, Run, job_key
from fairpod.store.records import Job
from fairpod.store.tables import JobRow

log = logging.getLogger("fairpod.watchdog")
EVERY = 1.0  # seconds between looks


@dataclass
class _Seen:
    attempt: int
    progress: tuple[int | None, float | None]  # (step, checkpoint_at) last seen
    active_at: float  # last sign of life: start, progress, output
    gpu_busy_at: float  # last time a GPU of the job was busy (real GPUs only)
    hung: bool = False  # notified for this episode


def output_seen(cp: CoreState, job: Job) -> float | None:
    """When a replica of the job's current attempt last wrote output, on the control plane's clock (None: no
    log here). A log that grew since the previous look (the watchdog's, once a second) was written then; the
    logs' mtimes are wall-clock times, which a step of the wall clock moves (server.runtime.steadyclock), so an mtime
    is read only at the first look at an attempt (and taken as no later than now)."""
    now, sizes, latest = cp.clock(), {}, None
    from_wall = getattr(cp.clock, "from_wall", float)
    for rank in range(job.nodes):
        path = cp.executor.log_path(job_key(job), rank, job.attempt)
        try:
            st = path.stat() if path is not None else None
        except OSError:
            st = None
        if st is not None:
            sizes[rank] = st.st_size
            latest = max(latest or 0.0, min(now, from_wall(st.st_mtime)))
    if not sizes:
        return None
    seen = cp.output_sizes.get(job.id)
    if seen is None or seen[0] != job.attempt:
        if len(cp.output_sizes) > 2 * len(cp.runs) + 100:  # ended jobs' sizes go
            for jid in [j for j in cp.output_sizes if j not in cp.runs]:
                del cp.output_sizes[jid]
        cp.output_sizes[job.id] = (job.attempt, sizes, latest or now)
    elif any(n > seen[1].get(r, 0) for r, n in sizes.items()):  # grew (a rank that left: not a sign of life)
        cp.output_sizes[job.id] = (job.attempt, sizes, now)
    else:
        cp.output_sizes[job.id] = (job.attempt, sizes, seen[2])
    return cp.output_sizes[job.id][2]


def gpu_utilization(cp: CoreState, job: Job, run: Run) -> list[float] | None:
    """Utilization (%) of the GPUs the job holds, when they are real GPUs the executor can read
    (:class:`fairpod.executors.base.HostGpus`); None otherwise."""
    gpus = capability(cp.executor, HostGpus)
    if gpus is None or not run.slots:
        return None
    nodes = [n for n in run.slots if cp._gpus_are_real(n)]
    if not nodes:
        return None
    held = list(dict.fromkeys(i // cp._partitions_per_gpu(n) for n in nodes for i in run.slots[n]))
    return gpus.gpu_utilization(held)



def live_attempts(runs: dict[int, Run]) -> dict[int, int]:
    """Job id -> attempt of the started attempts not stopping, in the runs' order. Every live attempt is looked
    at each second, ~30,000 at 10,000 nodes: the filters run in C (map, compress), not as Python loops (~40 ms a
    look at that size; benchmarks/turn_cost.py)."""
    on = list(map(and_, map(attrgetter("launched"), runs.values()),
                  map(is_, map(attrgetter("stopping"), runs.values()), repeat(None))))
    return dict(zip(compress(runs.keys(), on), map(attrgetter("attempt"), compress(runs.values(), on)), strict=True))


def unjudged(live: dict[int, int], watched: dict[int, tuple[int, bool]]) -> list[int]:
    """The ids of the live attempts not judged under their current attempt yet, sorted."""
    judged = map(itemgetter(0), map(watched.get, live, repeat((None,))))
    return sorted(compress(live, map(ne, judged, live.values())))


class Watchdog:
    def __init__(self, every: float = EVERY) -> None:
        self.every = every
        self.last = float("-inf")
        self.seen: dict[int, _Seen] = {}
        # per live attempt (job id -> attempt, watched): whether anything here can ever act on it under the
        # spec it was judged by (a limit, a hang timeout, an elastic job); only those are read each look
        self.watched: dict[int, tuple[int, bool]] = {}
        self.judged_spec: object = None

    def _to_watch(self, cp: CoreState) -> list[int]:
        """The ids of the live attempts this look must read: a job without a runtime limit, a hang timeout or
        elastic replicas is read once per attempt (and again when the spec changes), not once a second."""
        if cp.spec is not self.judged_spec:
            self.watched.clear()
            self.judged_spec = cp.spec
        live = live_attempts(cp.runs)
        for jid in self.watched.keys() - live.keys():
            del self.watched[jid]
        new = unjudged(live, self.watched)
        with cp.store.engine.connect() as conn:  # the stored specs as dicts: no job record (validation) each
            for i in range(0, len(new), 500):
                q = select(JobRow.id, JobRow.spec).where(JobRow.id.in_(new[i:i + 500]))
                for jid, spec in conn.execute(q):
                    limit, _ = cp.spec.runtime_limit(spec.get("max_runtime_seconds"), spec.get("priority"))
                    elastic = spec.get("max_nodes") is not None and spec["max_nodes"] > spec.get("nodes", 1)
                    needs = limit is not None or spec.get("hang_timeout_seconds") is not None or elastic
                    self.watched[jid] = (live[jid], needs)
        return list(compress(self.watched, map(itemgetter(1), self.watched.values())))

    def tick(self, cp: CoreState) -> None:
        now = cp.clock()
        if now - self.last < self.every:
            return
        self.last = now
        found = cp.store.get_jobs(self._to_watch(cp))
        running = [found[jid] for jid in sorted(found) if found[jid].state == JobState.RUNNING]
        for job in running:
            run = cp.runs.get(job.id)
            if run is None or not run.launched or run.stopping is not None:
                continue
            self._runtime(cp, job, run, now)
            if run.stopping is None and job.spec.hang_timeout_seconds is not None:
                self._hang(cp, job, run, now)
            elif run.stopping is None and job.spec.elastic and run.shrunk_at is not None:
                self._regroup(cp, job, run, now)
        alive = {j.id for j in running}
        for jid in [j for j in self.seen if j not in alive]:
            del self.seen[jid]

    # -- runtime limits -------------------------------------------------------------------------------
    def _runtime(self, cp: CoreState, job: Job, run: Run, now: float) -> None:
        limit, action = cp.spec.runtime_limit(job.spec.max_runtime_seconds, job.spec.priority)
        if limit is None or job.started_at is None or now - job.started_at < limit:
            return
        why = f"runtime limit: the attempt ran {now - job.started_at:.0f} s, the limit is {limit:g} s"
        kind = STOP_PREEMPT if action == "requeue" else STOP_FAIL
        cp.event("JobRuntimeLimit", f"job {job.name}: {why}; " + ("back to its queue" if kind == STOP_PREEMPT
                                                                   else "it ends Failed"), job, limit=limit)
        stop.begin_stop(cp, job, run, kind, why)

    # -- regroup after a shrink ----------------------------------------------------------------------
    def _regroup(self, cp: CoreState, job: Job, run: Run, now: float) -> None:
        timeout = cp.spec.policy.elastic_regroup_timeout_seconds
        shrunk = float(run.shrunk_at or now)
        if timeout is None or now - shrunk < timeout:
            return
        if job.checkpoint_at is not None:  # it reports progress: only a report counts (agents log while stuck)
            alive = job.checkpoint_at > shrunk
        else:
            out = output_seen(cp, job)
            alive = out is not None and out > shrunk
        s = self.seen.get(job.id)
        if s is None or s.attempt != job.attempt:
            s = self.seen[job.id] = _Seen(job.attempt, (job.checkpoint_step, job.checkpoint_at), shrunk, now)
        if alive:
            s.hung = False
            return
        signal = (f"no {'progress report' if job.checkpoint_at is not None else 'output'} in the {now - shrunk:.0f} s "
                  "since it shrank: its replicas did not re-form their group (a rendezvous still waiting for a "
                  "replica that left?)")
        self._act(cp, job, run, s, signal, f"regroup timeout {timeout:g} s")

    # -- hangs --------------------------------------------------------------------------------------
    def _hang(self, cp: CoreState, job: Job, run: Run, now: float) -> None:
        timeout = float(job.spec.hang_timeout_seconds or 0)
        progress = (job.checkpoint_step, job.checkpoint_at)
        started = job.started_at or now
        s = self.seen.get(job.id)
        if s is None or s.attempt != job.attempt:
            s = self.seen[job.id] = _Seen(job.attempt, progress, started, now)
        if progress != s.progress:
            s.progress, s.active_at = progress, now
        out = output_seen(cp, job)
        if out is not None and out > s.active_at:
            s.active_at = out
        gpus = gpu_utilization(cp, job, run)  # None: not real GPUs of this host
        if gpus is None or any(u > 0 for u in gpus):
            s.gpu_busy_at = now
        signal = None
        if now - s.active_at >= timeout:
            signal = f"no progress report and no output for {now - s.active_at:.0f} s"
        elif gpus is not None and now - s.gpu_busy_at >= timeout:
            signal = f"its GPUs were idle for {now - s.gpu_busy_at:.0f} s"
        if signal is None:
            s.hung = False
            return
        self._act(cp, job, run, s, signal, f"hang timeout {timeout:g} s")

    def _act(self, cp: CoreState, job: Job, run: Run, s: _Seen, signal: str, limit: str) -> None:
        """What the job's hang_action says: an event once (notify), or a restart or cancel."""
        action = job.spec.hang_action
        if action == "notify":
            if not s.hung:
                s.hung = True
                cp.event("JobHung", f"job {job.name} looks hung: {signal} ({limit})", job,
                         signal=signal, action=action)
            return
        if action == "restart":
            kind = STOP_RESTART if job.attempt < job.max_retry else STOP_FAIL
            what = "restarting it" if kind == STOP_RESTART else "no retries left: it fails"
        else:
            kind, what = STOP_CANCEL, "cancelling it"
        cp.event("JobHung", f"job {job.name} is hung: {signal}; {what}", job, signal=signal, action=action)
        stop.begin_stop(cp, job, run, kind, f"hung: {signal}")
        self.seen.pop(job.id, None)
