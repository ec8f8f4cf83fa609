"""How long the control plane's reconcile turns take, whole (the exits, the engine's cycle, the store's commit,
the keepers, the launches), for ``/metrics`` (``fairpod_reconcile_turn_duration_seconds``). In memory: it starts
again from zero when the control plane starts."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client.core import HistogramMetricFamily

TURN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class TurnHistogram:
    """Cumulative bucket counts of turn durations (thread-safe: the loop observes, a scrape reads)."""

    def __init__(self, buckets: tuple[float, ...] = TURN_BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.total = 0
        self.sum = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        with self._lock:
            for i, b in enumerate(self.buckets):
                if seconds <= b:
                    self.counts[i] += 1
            self.total += 1
            self.sum += seconds

    def family(self) -> Iterator[HistogramMetricFamily]:
        with self._lock:
            counts, total, summ = list(self.counts), self.total, self.sum
        fam = HistogramMetricFamily("fairpod_reconcile_turn_duration_seconds",
                                    "Duration of the control plane's whole reconcile turns (exits, engine cycle, "
                                    "commit, keepers, launches) since it started")
        fam.add_metric([], [(_le(b), c) for b, c in zip(self.buckets, counts, strict=True)] + [("+Inf", total)], summ)
        yield fam


def _le(b: float) -> str:
    return str(int(b)) if float(b).is_integer() else repr(b)
