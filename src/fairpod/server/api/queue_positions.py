"""Each pending job's place in its team's queue, for read paths that must not wait for a reconcile turn.

The positions come from the engine's queues, which only the holder of the control plane's lock may read. A turn
that admits thousands of jobs holds that lock for seconds, and the dashboard's tasks page used to wait for it.
:func:`queue_positions` reads them through ``Core.engine_facts`` (``fairpod.server.core.facts``): from the live
queues when the core is free, else from the copies of the queues the last turn published at its end (at most one
turn old, never a turn half done, and never a wait: every turn publishes them), for the teams asked for only (the
tasks page's one or two teams, not the 100,000 waiting jobs of a datacenter's 500 teams).
"""

from __future__ import annotations

from collections.abc import Iterable

from fairpod.server.core.api import AsOf, Core, Facts
from fairpod.server.runs import from_engine


def queue_positions(cp: Core, teams: Iterable[str] | None) -> tuple[dict[int, int], AsOf]:
    """Job id -> place in its team's queue (1 is next) for ``teams`` (None: all), and which view they are of."""
    wanted = None if teams is None else list(teams)

    def positions(f: Facts) -> dict[int, int]:
        return {from_engine(wid): i for team in (f.teams() if wanted is None else wanted)
                for wid, i in f.positions(team).items()}

    return cp.engine_facts(positions)
