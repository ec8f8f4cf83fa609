"""When will each pending job start? The engine run forward on a copy of the current state (an estimate).

Running jobs end at their expected time: ``Workload.expected`` seconds from their start, or, without one, what
``durations`` says for the job (the control plane gives the team's typical duration for the job's shape, which
only the forecast uses: the engine decides with what it is told, as the live one does); a job with neither is
assumed never to end, and a job past its expected end is assumed to end now. The clock then
jumps from event to event, as the simulator's does: a job's expected end, the end of a running job's
``min_runtime`` (it becomes a possible victim), the moment a reclaim held back for its cost may go ahead. At each
event the engine runs one cycle as it would then, and a pending job's estimate is the time of the first cycle that
admits it. Nothing new is assumed to arrive and no job ends early or fails, so the figure is an estimate: it moves
as the real cluster does.

The cost is bounded: at most ``max_cycles`` engine cycles and ``horizon`` seconds ahead; the run stops as
soon as every pending job has an estimate. Pure and deterministic: the snapshot given is not changed (unless
``in_place``).
"""

from __future__ import annotations

import copy
import heapq
import math
from collections.abc import Callable

from fairpod.governance.decisions import Admit, net_changes
from fairpod.governance.scheduler import schedule
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload

END, WAKE = 0, 1  # event kinds: a running job's expected end; the end of its min_runtime


def estimate_starts(snap: Snapshot, *, durations: Callable[[Workload], float | None] | None = None,
                    horizon: float = 30 * 86400, max_cycles: int = 2000,
                    in_place: bool = False) -> dict[str, float | None]:
    """Estimated start time of every pending job of ``snap``, by job id; None: not within ``horizon``
    seconds or ``max_cycles`` engine cycles, or it waits on jobs whose end is unknown."""
    sim = snap if in_place else copy.deepcopy(snap)
    start = sim.now
    out: dict[str, float | None] = dict.fromkeys(sim.pending)
    left = len(out)
    known: dict[str, float | None] = {}  # the engine is not told these: it decides as the live one would

    def length(w: Workload) -> float | None:
        if w.expected is not None:
            return w.expected
        if w.id not in known:
            known[w.id] = durations(w) if durations is not None else None
        return known[w.id]

    events: list[tuple[float, int, str, float]] = []  # (time, kind, job, the start of the run it belongs to)

    def watch(w: Workload) -> None:
        began = w.started if w.started is not None else sim.now
        n = length(w)
        end = math.inf if n is None else max(began + n, sim.now)
        if end != math.inf:
            heapq.heappush(events, (end, END, w.id, began))
        if w.min_runtime and began + w.min_runtime > sim.now and began + w.min_runtime < end:
            heapq.heappush(events, (began + w.min_runtime, WAKE, w.id, began))

    for w in list(sim.running.values()):
        if w.started is None:
            w.started = sim.now
        watch(w)
    cycles = 0
    while cycles < max_cycles:
        cycles += 1
        for d in net_changes(schedule(sim)):
            if isinstance(d, Admit):
                if d.job in out and out[d.job] is None:
                    out[d.job] = sim.now
                    left -= 1
                watch(sim.running[d.job])
        if not left or not sim.pending:
            break
        t = _next(sim, events)
        if sim.retry_at != math.inf and sim.retry_at > sim.now and (t is None or sim.retry_at < t):
            t = sim.retry_at  # a reclaim held back (rule 3b) may go ahead then
        if t is None or t - start > horizon:
            break
        sim.now = t
        while events and events[0][0] == t:
            _, kind, jid, began = heapq.heappop(events)
            ended = sim.running.get(jid)
            if kind == END and ended is not None and ended.started == began:
                sim.finish(jid)
    return out


def _next(sim: Snapshot, events: list[tuple[float, int, str, float]]) -> float | None:
    """The time of the next event that still means something (events of runs since preempted are dropped)."""
    while events:
        t, _, jid, began = events[0]
        w = sim.running.get(jid)
        if w is not None and w.started == began:
            return t
        heapq.heappop(events)
    return None
