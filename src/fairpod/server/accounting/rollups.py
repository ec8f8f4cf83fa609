"""Usage rollups: the samples summed per time bucket, so that reading usage over a long window costs a row per
series and bucket, not a row per series and sample.

A busy cluster changes its usage at every turn, so the usage sampler (``fairpod.server.accounting.usage``) writes a sample
every ``MIN_INTERVAL`` seconds: with 500 teams that is ~900,000 rows an hour, which the dashboard's trends, the
usage report and the budgets each read and integrated whole (an hour of them took 9.5 s to read and integrate).
``roll_up`` (the sampler calls it every ``EVERY`` seconds) integrates the samples into buckets of 30 s and sums those
into buckets of 150 s, 600 s and an hour: the bucket sizes of the dashboard's four windows, which the usage report
(days) and the budgets (periods) are made of. ``integrals`` answers an integration over any edges from the
largest buckets that fit and the samples for the rest (the last seconds, edges that are not on a bucket
boundary, anything not rolled up yet): the same figures as integrating the samples (a test holds them equal).

What is kept: samples for ``KEEP_SAMPLES`` after they are rolled up, the finer buckets for ``KEEP`` (the window
that reads them, and more), hourly buckets for ``policy.retention_days`` (``fairpod.store.retention``). So a
report's edge off the hour, older than the finer buckets are kept, takes its share of the hour it falls in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fairpod.server.accounting.usage_math import MAX_HOLD, Integrals, integrate
from fairpod.store import Store
from fairpod.store.rollups import SAMPLES_DELETED, Rollup
from fairpod.store.usage import FIGURES

RES = (30, 150, 600, 3600)  # bucket sizes, each a multiple of the one before: the dashboard windows' steps
EVERY = 30.0  # seconds of samples between two passes of roll_up (a pass each turn while it is behind)
PASS_SAMPLES = 150  # samples one pass rolls up at most by default: 5 minutes of a busy cluster's
PASS_ROWS = 40_000  # the sampler asks for as many samples as make about this many rows (500 teams: 78 samples)
PASS_SECONDS = 3 * 3600.0  # and at most this span (a gap where no sample holds is skipped at the next pass)
KEEP_SAMPLES = 2 * 3600.0  # samples are kept this long after they are rolled up
KEEP = {30: 3 * 3600.0, 150: 12 * 3600.0, 600: 3 * 86400.0}  # finer buckets are kept this long


def _floor(t: float, res: float) -> float:
    return math.floor(t / res) * res


def roll_up(store: Store, last_sample: float, samples: int = PASS_SAMPLES) -> bool:
    """One pass: roll up the samples up to ``last_sample`` (the last one written: the buckets that end by then are
    final) into buckets of 30 s, about ``samples`` samples' worth at most, then the coarser buckets those complete;
    prune what is no longer kept. Returns whether samples up to ``last_sample`` are left to roll up."""
    marks = store.rollup_marks()
    final = _floor(last_sample, RES[0])
    m = marks.get(RES[0])
    if m is None or not _in_force(store, m):  # the start, or a gap with nothing in force: skip to the next sample
        nxt = store.first_usage_after(-math.inf if m is None else m)
        if nxt is not None:
            m = _floor(nxt, RES[0]) if m is None else max(m, _floor(nxt, RES[0]))
    if m is not None:
        nth = store.nth_usage_after(m, samples)
        end = min(final, m + PASS_SECONDS)
        if nth is not None:
            end = min(end, max(m + RES[0], _floor(nth, RES[0])))
        if end > m:
            edges = [m + i * RES[0] for i in range(int(round((end - m) / RES[0])) + 1)]
            ints = integrate(store.list_usage(m, end), edges, end)
            store.write_rollups(RES[0], _rows(ints), end)
            marks[RES[0]] = end
    for fine, coarse in zip(RES, RES[1:], strict=False):
        if fine not in marks:
            break
        end = _floor(marks[fine], coarse)
        start = marks.get(coarse)
        if start is None:
            first = store.first_rollup(fine)
            start = _floor(first, coarse) if first is not None else end
        if end > start:
            store.write_rollups(coarse, _sum(store.list_rollups(fine, start, end), coarse), end)
            marks[coarse] = end
    _prune(store, marks, last_sample)
    m = marks.get(RES[0], -math.inf)
    nxt = store.first_usage_after(m) if m < final else None
    return nxt is not None and nxt < final


def _in_force(store: Store, t: float) -> bool:
    """Does a sample hold at ``t`` (one at or before it, at most ``MAX_HOLD`` old)?"""
    before = store.last_usage_before(t + 1e-9)
    return before is not None and before + MAX_HOLD > t


def _rows(ints: Integrals) -> list[Rollup]:
    out: list[Rollup] = []
    for j, cov in enumerate(ints.covered):
        if cov <= 0:
            continue
        t0 = ints.edges[j]
        for (kind, name, itype), figs in ints.series.items():
            out.append((t0, kind, name, itype, cov, *(figs[f][j] for f in FIGURES)))
    return out


def _sum(rows: Sequence[Rollup], res: int) -> list[Rollup]:
    """Finer buckets summed into buckets of ``res``; a bucket's ``covered`` is the sum over its finer buckets."""
    covered: dict[float, dict[float, float]] = {}  # coarse t0 -> fine t0 -> covered
    acc: dict[tuple[float, str, str, str], list[float]] = {}
    for r in rows:
        t0 = _floor(r[0], res)
        covered.setdefault(t0, {})[r[0]] = r[4]
        got = acc.setdefault((t0, r[1], r[2], r[3]), [0.0] * len(FIGURES))
        for i, v in enumerate(r[5:]):
            got[i] += v
    return [(t0, kind, name, itype, sum(covered[t0].values()), *figs)
            for (t0, kind, name, itype), figs in acc.items()]


def _prune(store: Store, marks: dict[int, float], now: float) -> None:
    if RES[0] in marks:
        cut = min(marks[RES[0]], now) - KEEP_SAMPLES
        if cut > marks.get(SAMPLES_DELETED, -math.inf):
            store.prune_rolled_samples(cut)
    for fine, coarse in zip(RES, RES[1:], strict=False):
        if fine in marks and coarse in marks:  # never what the coarser buckets have not taken in yet
            cut = min(marks[coarse], now - KEEP[fine])
            if cut > marks.get(-fine, -math.inf):
                store.prune_rollups(fine, cut)


def integrals(store: Store, edges: Sequence[float], until: float, kind: str | None = None) -> Integrals:
    """What ``integrate(store.list_usage(edges[0], until), edges, until)`` gives, read from the largest buckets
    that fit inside each of ``edges``' intervals and from the samples for the rest. Where the samples are deleted
    and no kept bucket fits (an edge off the buckets' boundaries, older than the finer buckets are kept), the
    interval takes the share of the smallest kept bucket around it that its seconds are of the bucket's.

    A roll-up pass may delete samples or buckets while this reads (each deletion moves its mark in the same
    transaction): then it reads again, with the new marks. ``kind``: the series of that kind only (``group``:
    every sample and bucket has the instance groups' rows, so what they cover is read from them alone)."""
    marks = store.rollup_marks()
    out = _read(store, edges, until, marks, kind)
    for _ in range(3):  # bounded: a pass every 30 s
        now = store.rollup_marks()
        if all(now.get(k) == marks.get(k) for k in (SAMPLES_DELETED, *(-r for r in RES))):
            break
        marks = now
        out = _read(store, edges, until, marks, kind)
    return out


def _read(store: Store, edges: Sequence[float], until: float, marks: dict[int, float],
          kind: str | None = None) -> Integrals:
    nb = len(edges) - 1
    out = Integrals(list(edges), [0.0] * nb, {})
    deleted = marks.get(SAMPLES_DELETED, -math.inf)  # the samples before this are deleted

    def fits(r: int, t0: float) -> bool:  # the bucket is written and not deleted (no rows: nothing was used)
        return marks.get(-r, -math.inf) <= t0 and t0 + r <= marks.get(r, -math.inf)

    shares: dict[int, dict[float, list[tuple[int, float]]]] = {r: {} for r in RES}  # res -> t0 -> (interval, share)
    loose: list[tuple[float, float, int]] = []  # (from, to, interval index): from the samples
    for j in range(nb):
        x, b = edges[j], min(edges[j + 1], until)
        while x < b:
            r = next((r for r in reversed(RES) if x % r == 0 and x + r <= b and fits(r, x)), None)
            if r is not None:
                shares[r].setdefault(x, []).append((j, 1.0))
                x += r
                continue
            if x < deleted:  # the samples are deleted: a share of a kept bucket around x, if any
                r = next((r for r in RES if fits(r, _floor(x, r))), None)
                if r is not None:
                    y = min(b, _floor(x, r) + r)
                    shares[r].setdefault(_floor(x, r), []).append((j, (y - x) / r))
                    x = y
                    continue
            y = min(b, _floor(x, RES[0]) + RES[0])
            if loose and loose[-1][1] == x and loose[-1][2] == j:
                loose[-1] = (loose[-1][0], y, j)
            else:
                loose.append((x, y, j))
            x = y
    for r, starts in shares.items():
        if not starts:
            continue
        counted: set[float] = set()  # a bucket's covered counts once, not once per series
        for row in store.list_rollups(r, min(starts), max(starts) + r, kind):
            for j, w in starts.get(row[0], ()):
                if row[0] not in counted:
                    out.covered[j] += row[4] * w
                figs = out.series.setdefault((row[1], row[2], row[3]), {f: [0.0] * nb for f in FIGURES})
                for f, v in zip(FIGURES, row[5:], strict=True):
                    figs[f][j] += v * w
            counted.add(row[0])
    for part in _runs(loose):
        cuts = sorted({p for a, b, _ in part for p in (a, b)})
        got = integrate(store.list_usage(cuts[0], min(cuts[-1], until), kind), cuts, until)
        index = {c: i for i, c in enumerate(cuts)}
        for a, _, j in part:
            i = index[a]
            out.covered[j] += got.covered[i]
            for key, figs in got.series.items():
                mine = out.series.setdefault(key, {f: [0.0] * nb for f in FIGURES})
                for f in FIGURES:
                    mine[f][j] += figs[f][i]
    return out


def _runs(loose: list[tuple[float, float, int]]) -> list[list[tuple[float, float, int]]]:
    """The pieces read from the samples, in runs close enough to read in one query (an hour apart at most)."""
    out: list[list[tuple[float, float, int]]] = []
    for p in loose:
        if out and p[0] - out[-1][-1][1] <= 3600:
            out[-1].append(p)
        else:
            out.append([p])
    return out
