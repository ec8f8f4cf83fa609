"""The discrete-event simulation: replay a trace through the governance engine on a virtual clock.

Events are job arrivals, job completions and, for jobs with a ``min_runtime``, the moment that runtime is
over (the job becomes a possible preemption victim). All events with the same timestamp are applied first,
then ``governance.schedule`` runs once for that timestamp. Times are rounded to the microsecond so that sums
of short durations land on the same timestamp.

A job needs ``duration`` seconds of work. When preempted, the work since its last checkpoint (taken every
``checkpoint_interval`` seconds of a run; without an interval, the whole run) is lost and the engine puts
the job back in its queue; when it starts again it needs what is left. A job that could not start even on
an empty cluster (too many nodes, over its team's borrow limit, nothing to borrow) is never given to the
engine and is reported as never runnable, with the engine's reason.

The engine is told each job's duration from the trace as its expected duration (what is left of it after
a preemption), as a user declares it; the starvation guard backfills held capacity with it.

An elastic job (``min_nodes`` in the trace) runs with ``min_nodes``..``nodes`` replicas; its ``duration`` is its
run time at ``nodes`` replicas, and with k replicas it progresses at k/nodes of that rate. When it grows or
shrinks, torchrun's elastic agents restart its workers from the last checkpoint (``torch.distributed.elastic``
restarts all workers on a membership change): the work since the last checkpoint is lost, as in a preemption,
but the job keeps running. Shrinks and grows are counted apart from preemptions.

A service (``kind`` service in the trace) is a long-lived elastic job whose minimum replicas are quota-bound, as
the control plane makes it (``governance.kinds``): its minimum starts only within its team's quota, never on
borrowed capacity; the replicas above it may borrow and are the first to go on reclaim. It is up for its
``duration`` of running time at any size (its size does not speed it up), and it has no work to lose: a shrink
drains replicas and a preemption of the whole service stops it until it starts again, so neither counts as lost
work (its preemptions and shrinks are counted). Its replica-seconds at and above its minimum are summed apart.
A Ray job (``kind`` ray) is one gang of its ``nodes``, as any job of a fixed size.

The run ends when nothing more can happen: no arrivals left and nothing running.

A job's events, its accounting per kind (work, lost work, a service's replica-seconds) and the engine's view of it
change together at each start and stop, here; a job's record and the result are in ``sim.jobs``, who borrows and
lends how much over time (and the timeline) in ``sim.ledger``.
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from collections.abc import Callable

from fairpod.governance import (
    Admit,
    Decision,
    Grow,
    Preempt,
    Shrink,
    Snapshot,
    Wait,
    Workload,
    feasible,
    net_changes,
    schedule,
)
from fairpod.governance.budget import next_period
from fairpod.governance.build import budget_meter, snapshot_from_spec
from fairpod.governance.kinds import kind_fields
from fairpod.model.spec import ClusterSpec
from fairpod.sim.jobs import SimJob, SimResult, expected
from fairpod.sim.ledger import Ledger
from fairpod.sim.trace import TraceJob

# a job moved to free whole nodes (``governance.consolidation``) is looked at again this long after, about when the
# live control plane could start it again (its loop cycles every quarter second; the moved replicas stop first)
MOVE_RESTART_SECONDS = 1.0


def _r(t: float) -> float:
    return round(t, 6)


class Simulation:
    """One replay of ``jobs`` on a fresh cluster built from ``spec``; call ``run()`` once."""

    def __init__(self, spec: ClusterSpec, jobs: list[TraceJob], *, record_timeline: bool = False,
                 on_cycle: Callable[[float, list[Decision]], None] | None = None,
                 on_progress: Callable[[float, int, int], None] | None = None, cadence: float = 0.0) -> None:
        self.spec = spec
        # decide at most every ``cadence`` seconds (0: after every event); see ``simulate``
        self.cadence = cadence
        self.last_cycle = -math.inf
        self.owed = False  # events applied since the last cycle that it has not decided on yet
        self.wake_at = math.inf  # the cycle owed is due then (an event of its own in ``events``)
        self.on_progress = on_progress  # told (virtual time, jobs completed, jobs runnable) every 1,000 cycles and at the end
        self.done = 0
        self.on_cycle = on_cycle  # told each cycle's time and decisions (as applied), e.g. to log them
        self.snap = snapshot_from_spec(spec)
        self.team_names = [t.name for t in spec.teams]
        empty = snapshot_from_spec(spec)
        verdicts: dict[tuple, str | None] = {}
        self.jobs: list[SimJob] = []
        self.by_id: dict[str, SimJob] = {}
        for j in jobs:
            w = Workload(j.name, j.team, j.itype, j.min_replicas, j.per_replica, priority=j.priority,
                         submit=_r(j.submit), min_runtime=min(j.min_runtime, spec.policy.max_min_runtime_seconds),
                         expected=expected(j, j.duration), user=j.user,  # the trace's duration: as declared
                         topology=j.topology, topology_required=j.topology_required,
                         choices=((j.itype, j.per_replica), *j.fallbacks) if j.fallbacks else (),
                         **kind_fields(j.kind, j.min_replicas, j.nodes))  # elastic, quota-bound: as the server
            whys = []
            for i in range(len(w.choices) or 1):  # with fallback instance types: runnable on one of them
                if w.choices:
                    w.choose(i)
                key = (j.team, w.shape)
                if key not in verdicts:
                    verdicts[key] = feasible.never_fits(empty, w, fixed=True)
                whys.append(verdicts[key])
            if w.choices:
                w.choose(0)
            why = None if None in whys else "; ".join(x for x in whys if x)
            sj = SimJob(j, None if why else w, j.duration, reason=f"never runnable: {why}" if why else "")
            self.jobs.append(sj)
            self.by_id[j.name] = sj
        self.events: list[tuple[float, int, str, int]] = []  # (time, seq, job id, version or -1 = wake-up)
        self.seq = 0
        for sj in self.jobs:  # the trace's priority changes (version -3)
            if sj.w is not None and sj.job.priority_change is not None:
                self._push(_r(sj.job.priority_change[0]), sj.job.name, -3)
        caps = spec.capacity()
        self.result = SimResult(
            spec=spec, teams=self.team_names, jobs=self.jobs,
            start=min((_r(j.submit) for j in jobs), default=0.0), end=0.0,
            capacity=sum(c.acc for c in caps.values()),
            quota={t.name: sum(q.acc for q in spec.team_quota(t).values()) for t in spec.teams},
            borrowed=dict.fromkeys(self.team_names, 0.0), lent=dict.fromkeys(self.team_names, 0.0),
        )
        self.ledger = Ledger(self.snap, self.result, self.team_names, record_timeline)
        self.ckpt: dict[str, SimJob] = {}  # running jobs that take checkpoints
        # budgets (rule 10): hours counted on the virtual clock (trace seconds as unix time), a wake-up at each
        # new period so that held jobs are looked at again
        self.meter = budget_meter(spec) if any(t.budgets for t in spec.teams) else None
        self.periods = sorted({b.period for t in spec.teams for b in t.budgets})
        self.woken: set[float] = set()
        self.due_woken: set[tuple[str, float]] = set()  # checkpoints due that a cycle wakes up for

    # -- events ------------------------------------------------------------------------------------
    def _push(self, t: float, jid: str, version: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, jid, version))

    def _start(self, sj: SimJob, t: float) -> None:
        assert sj.w is not None
        it = sj.on = sj.w.itype
        self.ledger.started(it, sj.job.team)
        sj.run_start = t
        if sj.first_start is None:
            sj.first_start = t
        sj.version += 1
        self._push(_r(t + sj.left / sj.progress), sj.job.name, sj.version)
        if sj.job.min_runtime > 0:
            self._push(_r(t + sj.job.min_runtime), sj.job.name, -1)
        if sj.job.checkpoint_interval:
            assert sj.w is not None
            sj.w.checkpoint = None
            self.ckpt[sj.job.name] = sj

    def _stop(self, sj: SimJob, t: float, *, preempted: bool) -> None:
        assert sj.run_start is not None
        run = t - sj.run_start
        rate = sj.rate
        sj.run_seconds += run * rate
        if sj.job.kind == "service":
            k, lo = len(sj.nodes), sj.job.min_replicas
            sj.at_min_seconds += run * min(k, lo)
            sj.above_min_seconds += run * max(0, k - lo)
        sj.run_start = None
        sj.version += 1
        self.ckpt.pop(sj.job.name, None)
        self.ledger.stopped(sj.on, sj.job.team)
        if not preempted:
            self.done += 1
            sj.left = 0.0
            sj.end = t
            return
        if sj.job.kind == "service":  # up for what it ran; nothing lost (see the module doc)
            sj.left = _r(sj.left - run)
            sj.preemptions += 1
            return
        iv = sj.job.checkpoint_interval
        saved = math.floor(run / iv + 1e-9) * iv if iv else 0.0
        sj.left = _r(sj.left - saved * rate)
        assert sj.w is not None
        sj.w.expected = expected(sj.job, sj.left)
        sj.lost_seconds += (run - saved) * rate
        sj.preemptions += 1

    def _resize(self, sj: SimJob, t: float, nodes: tuple[str, ...], grew: bool) -> None:
        """An elastic job grows or shrinks: its workers restart from the last checkpoint on ``nodes``."""
        lost0, pre0 = sj.lost_seconds, sj.preemptions
        self._stop(sj, t, preempted=True)
        sj.preemptions = pre0
        sj.lost_resize_seconds += sj.lost_seconds - lost0
        if grew:
            sj.grows += 1
            self.result.grows += 1
        else:
            sj.shrinks += 1
            self.result.shrinks += 1
        sj.nodes = nodes
        self._start(sj, t)

    def _checkpoints(self, t: float) -> None:
        """Tell the engine when each running job last checkpointed (it picks victims that lose least)."""
        for sj in self.ckpt.values():
            iv = sj.job.checkpoint_interval
            assert iv and sj.run_start is not None and sj.w is not None
            k = math.floor((t - sj.run_start) / iv + 1e-9)
            sj.w.checkpoint = _r(sj.run_start + k * iv) if k > 0 else None
            wait = self.snap.checkpoint_wait
            if wait > 0:  # it says when its next checkpoint is due; a preemption may wait for it (a wake-up then)
                due = sj.w.checkpoint_due = _r(sj.run_start + (k + 1) * iv)
                if self.snap.pending and due <= t + wait and (sj.job.name, due) not in self.due_woken:  # an upper bound
                    self.due_woken.add((sj.job.name, due))
                    self._push(due, sj.job.name, -1)

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> SimResult:
        snap, res = self.snap, self.result
        arrivals = [sj for sj in self.jobs if sj.w is not None]
        ai = 0
        last_t = res.start
        sampled = False
        while True:
            while self.events and ((not self.events[0][2] and self.events[0][3] != -2 and not snap.pending) or (
                    self.events[0][3] >= 0 and self.events[0][2]
                    and self.by_id[self.events[0][2]].version != self.events[0][3])):
                heapq.heappop(self.events)  # a completion of a run that was preempted; a new budget period
                # with no job waiting for it
            t_ev = self.events[0][0] if self.events else math.inf
            t_arr = arrivals[ai].w.submit if ai < len(arrivals) else math.inf  # type: ignore[union-attr]
            t = min(t_ev, t_arr)
            if t == math.inf:
                break
            if sampled:
                self.ledger.integrate(t - last_t)
            if self.meter is not None:  # budget hours of the usage held until now, before anything ends
                self.meter.accrue(snap.teams, t)
            last_t = t
            changed = False
            while self.events and self.events[0][0] == t:
                _, _, jid, version = heapq.heappop(self.events)
                if not jid:  # a new budget period, or (version -2) the cycle owed at the cadence
                    changed |= self.owed if version == -2 else bool(snap.pending)
                    continue
                sj = self.by_id[jid]
                if version == -3:  # the trace's priority change (fairpod set-priority)
                    changed |= _reprioritize(snap, sj)
                    continue
                if version < 0:
                    changed |= bool(snap.pending)  # a min_runtime ended: victims may now be taken
                elif version == sj.version:
                    snap.finish(jid)
                    self._stop(sj, t, preempted=False)
                    res.end = max(res.end, t)
                    changed = True
            while ai < len(arrivals) and arrivals[ai].w.submit == t:  # type: ignore[union-attr]
                snap.add_pending(arrivals[ai].w)  # type: ignore[arg-type]
                if snap.preempt_min_wait > 0:  # it may trigger preemption from then on: a cycle then
                    self._push(_r(t + snap.preempt_min_wait), arrivals[ai].job.name, -1)
                ai += 1
                changed = True
            if not changed:
                continue
            if self.cadence > 0:  # the live loop's pace: one cycle for all that happened since the last one
                due = _r(self.last_cycle + self.cadence)
                if t < due:
                    self.owed = True
                    if self.wake_at != due:
                        self.wake_at = due
                        self._push(due, "", -2)
                    continue
                self.owed = False
                self.last_cycle = t
            self._checkpoints(t)
            snap.now = t
            c0 = time.process_time()
            decisions = net_changes(schedule(snap))  # a job admitted and taken back in one cycle never ran
            res.cpu_seconds += time.process_time() - c0
            res.cycles += 1
            res.decisions += len(decisions)
            if self.on_progress is not None and not res.cycles % 1000:
                self.on_progress(t, self.done, len(arrivals))
            if self.on_cycle is not None:
                self.on_cycle(t, decisions)
            for d in decisions:
                sj = self.by_id[d.job]
                if isinstance(d, Admit):
                    res.admits += 1
                    sj.nodes = d.nodes
                    self._start(sj, t)
                    if sj.job.topology in snap.levels:
                        lv = snap.levels.index(sj.job.topology)
                        sj.domains = len({snap.nodes[n].topo[lv] for n in d.nodes})
                elif isinstance(d, Preempt):
                    res.preemptions += 1
                    self._stop(sj, t, preempted=True)
                    if snap.preempt_min_wait > 0:  # requeued: it may trigger preemption again from then on
                        self._push(_r(t + snap.preempt_min_wait), sj.job.name, -1)
                    if d.kind == "move":  # moved (rule 12): looked at again in the next cycle
                        self._push(_r(t + MOVE_RESTART_SECONDS), sj.job.name, -1)
                elif isinstance(d, Grow | Shrink):
                    self._resize(sj, t, d.nodes, isinstance(d, Grow))
                elif isinstance(d, Wait):
                    res.waits += 1
                    sj.reason = d.reason
            if snap.retry_at != math.inf and snap.pending:  # a reclaim held back (rule 3b): a cycle when it may go
                nxt = _r(snap.retry_at)
                if nxt > t and nxt not in self.woken:
                    self.woken.add(nxt)
                    self._push(nxt, "", -1)
            self.ledger.sample(t)
            sampled = True
            if self.meter is not None and snap.pending:  # held jobs are looked at again when a period begins
                for period in self.periods:
                    nxt = _r(next_period(period, t))
                    if nxt not in self.woken:
                        self.woken.add(nxt)
                        self._push(nxt, "", -1)
        res.end = max(res.end, last_t)
        if self.on_progress is not None:
            self.on_progress(last_t, self.done, len(arrivals))
        return res


def _reprioritize(snap: Snapshot, sj: SimJob) -> bool:
    """The job's priority changed (``TraceJob.priority_change``): as the control plane does, a pending job is queued
    again under its new key (its submit time and sequence kept), a running one counts with it. Did anything change?"""
    w = sj.w
    if w is None or sj.job.priority_change is None:
        return False
    prio = sj.job.priority_change[1]
    if w.id in snap.pending:
        snap.remove_pending(w.id)
        w.priority = prio
        snap.add_pending(w)
        return True
    w.priority = prio
    return w.id in snap.running


def simulate(spec: ClusterSpec, jobs: list[TraceJob], *, record_timeline: bool = False,
             on_cycle: Callable[[float, list[Decision]], None] | None = None,
             on_progress: Callable[[float, int, int], None] | None = None, cadence: float = 0.0) -> SimResult:
    """Replay ``jobs`` on the cluster of ``spec``; see the module doc. ``on_cycle(t, decisions)`` is called after
    each scheduling cycle with the decisions the simulation applies; ``on_progress(t, completed, runnable)`` every
    1,000 cycles and once at the end. ``cadence`` > 0: decide as the live control plane's loop does, one cycle for
    everything that happened since the last one, at most every ``cadence`` simulated seconds (events are still
    applied at their own times: a job ends and frees its nodes when it ends, and is counted so; what it frees is
    given out at the next cycle); 0 (the default): a cycle after every event time."""
    sim = Simulation(spec, jobs, record_timeline=record_timeline, on_cycle=on_cycle, on_progress=on_progress,
                     cadence=cadence)
    # The engine's short-lived tuples are freed by reference counting, so while the replay runs the garbage
    # collector's young pass runs every 50,000 allocations instead of every 700 and finds as much (the contended ITP
    # replay: ~8 % less time); the caller's setting is restored when it returns.
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], 50_000), *thresholds[1:])
    try:
        return sim.run()
    finally:
        gc.set_threshold(*thresholds)
