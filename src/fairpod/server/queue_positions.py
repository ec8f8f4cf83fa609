"""Each pending job's place in its team's queue, for read paths that must not wait for a reconcile turn.

The positions come from the engine's snapshot, which only the holder of the control plane's lock may read.
A turn that admits thousands of jobs holds that lock for seconds, and the dashboard's tasks page used to wait
for it. ``QueuePositions.read`` waits for the lock ``WAIT`` seconds at most: when it gets it, it reads the
positions of the teams asked for and remembers them; when a turn holds it, it answers with the positions it
remembers (as of ``at``, the control plane's clock when they were read; a job queued since has none yet).
"""

from __future__ import annotations

import threading

from fairpod.governance.snapshot import Snapshot
from fairpod.server.core.api import Busy, Core
from fairpod.server.runs import from_engine

WAIT = 0.05  # seconds a read waits for the control plane's lock before it answers from what it remembers


class QueuePositions:
    def __init__(self) -> None:
        self._teams: dict[str, tuple[float, dict[int, int]]] = {}  # team -> (read at, job id -> position)
        self._lock = threading.Lock()

    def read(self, cp: Core, teams: list[str] | None) -> tuple[dict[int, int], float | None]:
        """Job id -> place in its team's queue (1 is next) for ``teams`` (None: all), and when they were read
        (the oldest team's time; None if nothing was ever read for them)."""

        def positions(snap: Snapshot) -> dict[str, tuple[float, dict[int, int]]]:
            now = cp.clock()
            return {name: (now, {from_engine(w.id): i for i, w in enumerate(t.queue.in_order(), 1)})
                    for name, t in snap.teams.items() if teams is None or name in teams}

        try:
            fresh = cp.engine_read(positions, wait=WAIT)
        except Busy:
            fresh = None
        if fresh is not None:
            with self._lock:
                if teams is None:
                    self._teams = fresh
                else:
                    self._teams.update(fresh)
        with self._lock:
            known = [v for k, v in self._teams.items() if teams is None or k in teams]
        out: dict[int, int] = {}
        for _, pos in known:
            out.update(pos)
        return out, min((at for at, _ in known), default=None)
