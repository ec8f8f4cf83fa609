"""The kinds of workload as the engine sees them: one home for each kind's rule, asked by the control plane
(``server.core.memory``, a stored job) and the simulator (``sim.run``, a trace row).

- **job**: ``nodes`` replicas; with ``max_nodes`` above it, an elastic job of ``nodes``..``max_nodes`` replicas
  (engine rule 11).
- **service**: replicas that run until deleted; ``nodes`` is its minimum, ``max_nodes`` its maximum. Its minimum is
  quota-bound (``Workload.quota_bound``): admitted only within its team's quota, never on borrowed capacity, and
  last among a reclaim's victims; the replicas above it may borrow and are the first to go.
- **ray**: a private Ray cluster on ``nodes`` replicas, one gang (admitted whole or not at all) like any job's; the
  simulator's traces give it a fixed size.
"""

from __future__ import annotations

from typing import Any

KINDS = ("job", "service", "ray")


def kind_fields(kind: str, nodes: int, max_nodes: int | None = None) -> dict[str, Any]:
    """The ``Workload`` fields of a workload of ``kind`` with ``nodes`` (its minimum) up to ``max_nodes`` replicas:
    ``min_n`` and ``max_n`` (0 for a fixed size) and ``quota_bound``. ValueError for an unknown kind."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r} (kinds: {', '.join(KINDS)})")
    elastic = max_nodes is not None and max_nodes > nodes
    return {"min_n": nodes if elastic else 0, "max_n": max_nodes if elastic else 0, "quota_bound": kind == "service"}
