"""Usage rollups (``fairpod.server.accounting.rollups``) against a real SQLite store: whatever has been rolled up, reading
usage over any edges gives what integrating every sample gives, while the store keeps a bucket per series instead
of a row per series and sample."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairpod.server.accounting import rollups
from fairpod.server.accounting.rollups import integrals, roll_up
from fairpod.server.accounting.usage_math import Integrals, integrate
from fairpod.store import Store
from fairpod.store.tables import UsageRollupRow, UsageSampleRow
from fairpod.store.usage import FIGURES, GROUP, TEAM, UsageSample

T0 = 1_800_000_000.0  # a multiple of an hour


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'fairpod.db'}")
    s.create_all()
    yield s
    s.close()


def sample(i: int, t: float) -> list[UsageSample]:
    """Figures that change with ``i``; team b is missing from every third sample (it used nothing then)."""
    out = [UsageSample(GROUP, "g", "t1", acc=i % 7, vcpu=i % 5, cap_acc=8, nodes=2, healthy_nodes=2 - i % 2, ts=t),
           UsageSample(TEAM, "a", "t1", acc=i % 3, cap_acc=4, borrowed=i % 2, ts=t)]
    if i % 3:
        out.append(UsageSample(TEAM, "b", "t1", acc=i % 4, cap_acc=4, lent=1, ts=t))
    return out


def write(store: Store, times: list[float]) -> list[UsageSample]:
    """The samples at ``times``, written in one transaction (the sampler writes one per transaction: how they were
    committed is nothing to the rollups, and 8,640 commits of SQLite with synchronous=FULL were most of this
    module's time)."""
    rows = []
    with store.tx() as tx:
        for i, t in enumerate(times):
            rows += sample(i, t)
            tx.append_usage(t, sample(i, t))
    return rows


def roll_all(store: Store, last: float) -> None:
    for _ in range(10_000):  # bounded: each pass rolls up 300 samples or finishes
        if not roll_up(store, last, samples=300):
            return
    raise AssertionError("roll_up never finished")


def same(got: Integrals, want: Integrals) -> None:
    assert got.covered == pytest.approx(want.covered, abs=1e-6)
    for key in set(got.series) | set(want.series):
        for f in FIGURES:
            g = got.series.get(key, {}).get(f, [0.0] * len(got.covered))
            w = want.series.get(key, {}).get(f, [0.0] * len(want.covered))
            assert g == pytest.approx(w, rel=1e-9, abs=1e-6), (key, f)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gaps=st.lists(st.floats(0.5, 400.0), min_size=1, max_size=60),
       cuts=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6), rolled=st.floats(0.0, 1.0))
def test_any_edges_read_the_same_figures_as_integrating_every_sample(tmp_path_factory: pytest.TempPathFactory,
                                                                     gaps: list[float], cuts: list[float],
                                                                     rolled: float) -> None:
    # samples 0.5 s to 400 s apart (past MAX_HOLD: a control plane that was down), rolled up to a point
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('r') / 'fairpod.db'}")
    store.create_all()
    times = [T0 + 7.3 + sum(gaps[:i]) for i in range(len(gaps))]
    rows = write(store, times)
    end = times[-1] + 100
    roll_all(store, times[0] + rolled * (times[-1] - times[0]))
    # any edges: off the buckets' boundaries, on them, past the last sample
    edges = sorted({T0, end, *(T0 + c * (end - T0) for c in cuts), T0 + 30 * math.floor(cuts[0] * 100)})
    edges = [e for e in edges if e <= end]
    if len(edges) < 2:
        edges = [T0, end]
    same(integrals(store, edges, end), integrate(rows, edges, end))
    # the instance groups' series alone (the dashboard's cluster page) read from their rows only: the same
    same(integrals(store, edges, end, GROUP), integrate([r for r in rows if r.kind == GROUP], edges, end))
    store.close()


def test_a_busy_day_is_read_from_its_buckets_and_its_samples_are_deleted(store: Store) -> None:
    # two days of a sample every 20 s, rolled up as the sampler does (every 30 s of samples)
    times = [T0 + 20.0 * i for i in range(2 * 86400 // 20)]
    rows = []
    for k in range(0, len(times), 90):
        rows += write(store, times[k:k + 90])
        roll_all(store, times[min(k + 89, len(times) - 1)])
    now = times[-1] + 5
    marks = store.rollup_marks()
    assert marks[30] == math.floor(times[-1] / 30) * 30 and marks[3600] == math.floor(times[-1] / 3600) * 3600
    # the samples older than KEEP_SAMPLES and the finer buckets older than KEEP are gone
    with store.tx() as t, t._session(False) as s:
        first_sample = s.query(UsageSampleRow.ts).order_by(UsageSampleRow.ts).first()[0]
        first_30 = s.query(UsageRollupRow.t0).filter(UsageRollupRow.res == 30, UsageRollupRow.kind != "mark") \
            .order_by(UsageRollupRow.t0).first()[0]
    assert first_sample >= marks[30] - rollups.KEEP_SAMPLES - 20
    assert first_30 >= now - rollups.KEEP[30] - 3600
    # each dashboard window (aligned to its step, as usage.history asks) reads what every sample gives
    for span, n in ((3600.0, 120), (6 * 3600.0, 144), (86400.0, 144), (2 * 86400.0 - 3600, 47)):
        step = span / n
        last = math.ceil(now / step) * step
        edges = [last - span + i * step for i in range(n + 1)]
        same(integrals(store, edges, now), integrate(rows, edges, now))
        same(integrals(store, edges, now, GROUP), integrate([r for r in rows if r.kind == GROUP], edges, now))
    # and a report's days, with a start on the hour
    edges = [T0 + 3600, T0 + 86400, now]
    same(integrals(store, edges, now), integrate(rows, edges, now))
    # a start off the hour, older than the samples and the finer buckets: its share of the hour it falls in
    edges = [T0 + 3600 + 1234.5, T0 + 86400, now]
    got, want = integrals(store, edges, now), integrate(rows, edges, now)
    assert got.covered == pytest.approx(want.covered)
    assert got.series[(GROUP, "g", "t1")]["acc"][0] == pytest.approx(want.series[(GROUP, "g", "t1")]["acc"][0],
                                                                      rel=0.01)
    assert got.series[(GROUP, "g", "t1")]["acc"][1] == pytest.approx(want.series[(GROUP, "g", "t1")]["acc"][1])


def test_a_month_without_samples_is_crossed_in_a_few_short_passes(store: Store) -> None:
    # a control plane down for 30 days: a pass never integrates the whole gap at once (it ran in a reconcile turn
    # for seconds, with a list per series as long as the gap in 30 s buckets)
    old = write(store, [T0 + 20.0 * i for i in range(50)])
    later = T0 + 30 * 86400.0
    new = write(store, [later + 20.0 * i for i in range(50)])
    assert roll_up(store, later + 20.0 * 49, samples=150)  # behind: the first pass stops within PASS_SECONDS
    assert store.rollup_marks()[30] - T0 <= rollups.PASS_SECONDS
    for _ in range(3):  # then the gap, where no sample holds, is skipped
        if not roll_up(store, later + 20.0 * 49, samples=150):
            break
    else:
        raise AssertionError("still behind after 4 passes")
    assert store.rollup_marks()[30] == math.floor((later + 20.0 * 49) / 30) * 30
    edges = [T0, T0 + 3600, later, later + 3600]
    same(integrals(store, edges, later + 20.0 * 49), integrate(old + new, edges, later + 20.0 * 49))
