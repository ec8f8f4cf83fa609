"""Each pending job's place in its team's queue, for read paths that must not wait for a reconcile turn.

The positions come from the engine's snapshot, which only the holder of the control plane's lock may read. A turn
that admits thousands of jobs holds that lock for seconds, and the dashboard's tasks page used to wait for it.
``QueuePositions.read`` reads them through ``Core.engine_view`` (``fairpod.server.core.published``): computed now
when the core is free, else as the last turn published them at its end (at most one turn old), with the core's
clock when they were read (a job queued since has none yet).
"""

from __future__ import annotations

from fairpod.governance.snapshot import Snapshot
from fairpod.server.core.api import Core
from fairpod.server.runs import from_engine


class QueuePositions:
    def read(self, cp: Core, teams: list[str] | None) -> tuple[dict[int, int], float | None]:
        """Job id -> place in its team's queue (1 is next) for ``teams`` (None: all), and when they were read
        (None: a turn holds the core and none were published for these teams yet)."""
        wanted = None if teams is None else frozenset(teams)

        def positions(snap: Snapshot) -> dict[int, int]:
            return {from_engine(w.id): i for name, t in snap.teams.items() if wanted is None or name in wanted
                    for i, w in enumerate(t.queue.in_order(), 1)}

        got = cp.engine_view(("queue positions", wanted), positions)
        return ({}, None) if got is None else (got[0], got[1].at)
