"""How long the control plane's reconcile turns take, whole (the exits, the engine's cycle, the store's commit,
the keepers, the launches), for ``/metrics`` (``fairpod_reconcile_turn_duration_seconds``). In memory: it starts
again from zero when the control plane starts."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator

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


MAX_PAUSE_S = 1.0  # a woken turn never waits longer than this for the pace


class TurnPace:
    """How soon a woken reconcile turn may start: no sooner after the last turn ended than that turn lasted
    (at most ``MAX_PAUSE_S``). A burst of submits wakes the loop once per submit; turn after turn back to back
    (each with its engine cycle over the whole queue) would take the one core the requests need too, each turn
    for the few jobs that came in during the last. Paced, the turns take at most about half of the control
    plane's time under a stream of wakes, the requests the rest, and one turn takes in everything the pause
    gathered. A turn of a few milliseconds (a small cluster) waits as many; an idle loop does not wait at all."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, max_pause: float = MAX_PAUSE_S) -> None:
        self.clock = clock
        self.max_pause = max_pause
        self._ended = -math.inf
        self._lasted = 0.0

    def pause(self) -> float:
        """Seconds to wait before the next turn starts (0: it may start now)."""
        return max(0.0, min(self._lasted, self.max_pause) - (self.clock() - self._ended))

    def wait(self, stop: threading.Event) -> bool:
        """Wait for the pace (or for ``stop``); True when ``stop`` was set."""
        pause = self.pause()
        return stop.wait(pause) if pause > 0.0 else stop.is_set()

    def ran(self, started: float, ended: float) -> None:
        """A turn ran from ``started`` to ``ended`` (times of ``clock``)."""
        self._lasted = max(0.0, ended - started)
        self._ended = ended
