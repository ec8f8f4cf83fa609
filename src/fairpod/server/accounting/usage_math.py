"""The arithmetic on usage samples: a sample's figures hold until the next sample, never longer than
``MAX_HOLD`` (a longer gap means the control plane was down), and ``integrate`` turns samples into
value x seconds per time bucket (see ``fairpod.server.accounting.usage``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fairpod.store.usage import FIGURES, UsageSample

MAX_HOLD = 300.0  # seconds a sample's figures count for at most (five of the sampler's heartbeats)


@dataclass
class Integrals:
    """Per series and bucket: each figure x seconds; per bucket: the seconds some sample covered."""

    edges: list[float]
    covered: list[float]
    series: dict[tuple[str, str, str], dict[str, list[float]]]

    def mean(self, key: tuple[str, str, str], fig: str) -> list[float | None]:
        vals = self.series.get(key, {}).get(fig) or [0.0] * len(self.covered)
        return [round(v / c, 4) if c > 0 else None for v, c in zip(vals, self.covered, strict=True)]


def integrate(rows: Sequence[UsageSample], edges: Sequence[float], until: float,
              max_hold: float = MAX_HOLD) -> Integrals:
    """Integrate the step function of ``rows`` (sorted by ts) over the buckets ``edges[i]..edges[i+1]``.

    A sample holds from its ts to the next sample's ts, at most ``max_hold`` seconds, and not past ``until``
    (now, for the current sample). A series missing from a sample counts as zero for that sample's span.
    """
    nb = len(edges) - 1
    covered = [0.0] * nb
    series: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    snaps: list[tuple[float, list[UsageSample]]] = []
    for r in rows:
        if snaps and snaps[-1][0] == r.ts:
            snaps[-1][1].append(r)
        else:
            snaps.append((r.ts, [r]))
    for i, (t0, group) in enumerate(snaps):
        t1 = min(snaps[i + 1][0] if i + 1 < len(snaps) else until, t0 + max_hold, until)
        if t1 <= t0:
            continue
        j = max(0, _bucket(edges, t0))
        while j < nb and edges[j] < t1:
            lo, hi = max(t0, edges[j]), min(t1, edges[j + 1])
            if hi > lo:
                dt = hi - lo
                covered[j] += dt
                for r in group:
                    figs = series.setdefault(r.key, {f: [0.0] * nb for f in FIGURES})
                    for f in FIGURES:
                        figs[f][j] += getattr(r, f) * dt
            j += 1
    return Integrals(list(edges), covered, series)


def _bucket(edges: Sequence[float], t: float) -> int:
    lo, hi = 0, len(edges) - 1
    while lo < hi:  # the last edge <= t
        mid = (lo + hi + 1) // 2
        if edges[mid] <= t:
            lo = mid
        else:
            hi = mid - 1
    return lo
