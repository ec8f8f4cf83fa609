"""Kueue's scheduler-performance generator files (``../shared/kueue/perf/``), as fairpod's benchmarks read them."""

from __future__ import annotations

from typing import Any


def queues(doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(how many ClusterQueues the file makes, the queues set they share): every cohort's ``count`` times each of
    its queues sets' ``count``; the generator's shapes give all their queues one set (the last one is returned)."""
    teams = 0
    qs: dict[str, Any] | None = None
    for c in doc["cohorts"]:
        for q in c["queuesSets"]:
            teams += c["count"] * q["count"]
            qs = q
    if qs is None:
        raise ValueError("the generator file defines no queuesSets")
    return teams, qs
