"""Priority aging (opt-in: ``policy.priority_aging_per_hour`` and ``priority_aging_max``; KAI's aging, Kueue's priority
boost): under TaskRanking a pending job's place in its team's queue is by its priority plus a boost that grows by
``per_hour`` points for each hour it has waited (since it was last queued), at most ``max`` points; ties as before
(submit time). So a long-waiting low-priority job passes newer higher-priority ones, within a bound.

The boost orders the queue: which job of a team is offered first. A job keeps the boost it started with while it
runs, so its team's higher-priority jobs stop it only if they outrank that (else the job that aged to the front would
be stopped at once); a waiting job's own boost never lets it stop a running one (the one stopped would wait, age, and
stop it back). The order across teams is unchanged. The engine reads the time from the snapshot: at the start of each
cycle the queues whose boosts changed are ordered again (``refresh``); off, nothing is computed.
"""

from __future__ import annotations

import heapq

from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload


def boost(snap: Snapshot, w: Workload) -> int:
    """The points ``w`` gains from waiting, now."""
    rate, cap = snap.aging
    if rate <= 0 or cap <= 0:
        return 0
    waited = snap.now - w.waiting_since()
    return min(cap, int(rate * waited / 3600.0)) if waited > 0 else 0


def refresh(snap: Snapshot) -> None:
    """Order again each team's queue where a job's boost changed since the last cycle."""
    rate, cap = snap.aging
    if rate <= 0 or cap <= 0 or not snap.task_ranking:
        return
    if len(snap.boosts) > 2 * (len(snap.pending) + len(snap.running)) + 64:  # jobs that ended
        snap.boosts = {k: b for k, b in snap.boosts.items() if k in snap.pending or k in snap.running}
    for team in list(snap.waiting.values()):
        q = team.queue
        changed = False
        for w in q.live.values():
            b = boost(snap, w)
            if snap.boosts.get(w.id, 0) != b:
                snap.boosts[w.id] = b
                changed = True
        if changed:
            q.tops = None
            q.heaps = {}
            for w in q.live.values():
                heapq.heappush(q.heaps.setdefault(w.shape, []), (snap.queue_key(w), w.id))
