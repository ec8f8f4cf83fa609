"""Usage samples: the step-function arithmetic, the sampler's write rules, report helpers."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from fairpod.governance.build import snapshot_from_spec
from fairpod.governance.workload import Workload
from fairpod.model.resources import Res
from fairpod.model.spec import seed_spec
from fairpod.server.accounting.usage import UsageSampler, current_samples, history
from fairpod.server.accounting.usage_math import integrate
from fairpod.server.api.routes_reports import day_edges, parse_time, run_windows
from fairpod.server.core.batch import BatchingStore
from fairpod.server.core.door import Door
from fairpod.server.core.queries import Queries
from fairpod.store import Store
from fairpod.store.usage import GROUP, TEAM, UsageSample


def team(name: str, ts: float, acc: float, quota: float, borrowed: float = 0.0) -> UsageSample:
    return UsageSample(TEAM, name, "t1", acc=acc, cap_acc=quota, borrowed=borrowed, ts=ts)


def test_integrate_holds_each_sample_until_the_next():
    rows = [team("a", 0, 4, 8), team("b", 0, 2, 2), team("a", 30, 8, 8), team("b", 30, 6, 2, 4)]
    ints = integrate(rows, [0, 20, 40, 60], until=60)
    a, b = ints.series[(TEAM, "a", "t1")], ints.series[(TEAM, "b", "t1")]
    assert ints.covered == [20, 20, 20]
    assert a["acc"] == [80, 4 * 10 + 8 * 10, 160]
    assert b["borrowed"] == [0, 40, 80]
    assert ints.mean((TEAM, "a", "t1"), "acc") == [4, 6, 8]


def test_a_series_missing_from_a_sample_counts_zero_and_gaps_are_not_counted():
    rows = [team("a", 0, 4, 8), team("b", 0, 2, 2), team("b", 10, 2, 2), team("b", 1000, 2, 2)]
    ints = integrate(rows, [0, 2000], until=1100, max_hold=300)
    assert ints.series[(TEAM, "a", "t1")]["acc"] == [40]  # only until the sample at 10 that lacks it
    # b: 0..10, 10..310 (held 300 s at most, the control plane was down), 1000..1100
    assert ints.covered == [10 + 300 + 100]
    assert ints.series[(TEAM, "b", "t1")]["acc"] == [2 * 410]
    assert ints.mean((TEAM, "nobody", "t1"), "acc") == [0.0]


def test_integrate_splits_at_bucket_edges_and_stops_at_until():
    rows = [team("a", 5, 10, 10)]
    ints = integrate(rows, [0, 10, 20, 30], until=25)
    assert ints.series[(TEAM, "a", "t1")]["acc"] == [50, 100, 50]
    assert ints.mean((TEAM, "a", "t1"), "acc") == [10, 10, 10]


def test_day_edges_and_times():
    since = parse_time("2024-03-01", "from", end=False)
    until = parse_time("2024-03-02", "to", end=True)
    assert until - since == 2 * 86400
    assert day_edges(since, until) == [since, since + 86400, until]
    noon = parse_time("2024-03-01T12:00:00Z", "from", end=False)
    assert day_edges(noon, noon + 86400) == [noon, since + 86400, noon + 86400]
    assert parse_time("2024-03-01T14:00:00+02:00", "from", end=False) == noon
    with pytest.raises(Exception, match="not a date"):
        parse_time("yesterday", "from", end=False)


def test_run_windows_from_lifecycle_events():
    ev = [SimpleNamespace(kind=k, ts=t) for k, t in
          [("JobAdmitted", 10), ("JobPreempted", 20), ("JobRequeued", 25), ("JobAdmitted", 40), ("JobSucceeded", 70)]]
    job = SimpleNamespace(finished_at=70.0)
    assert run_windows(job, ev, now=100) == [[10, 20], [40, 70]]
    running = SimpleNamespace(finished_at=None)
    assert run_windows(running, ev[:4], now=100) == [[10, 20], [40, 100]]


class Plane(Door, SimpleNamespace):
    """The control plane's door (``Core.engine_read``, ``record_usage``, ``roll_up_usage``, ``queries``) over a
    store and a snapshot of the test's own, without a control plane around them."""


@pytest.fixture
def cp(tmp_path: Path):
    spec = seed_spec()
    store = Store(f"sqlite:///{tmp_path / 'fp.db'}")
    store.create_all()
    for g in spec.cluster.instance_groups:
        for i in range(g.count):
            store.add_node(f"{g.name}-{i}", g.name, g.instance_type)
    clock = SimpleNamespace(t=1000.0)
    batching = BatchingStore(store)  # as the control plane holds its store
    cp = Plane(spec=spec, snap=snapshot_from_spec(spec), store=batching, clock=lambda: clock.t, cycles=0,
               cycle_seconds=0.0, now=clock, queries=Queries(batching), lock=threading.RLock())
    yield cp
    store.close()


def start(cp, wid: str, team_name: str, nodes: list[str]) -> None:
    w = Workload(wid, team_name, "ml.g5.12xlarge", len(nodes), Res(4, 48000, 196608))
    cp.snap.assign(w, nodes)


def test_current_samples_match_the_seed_scenario(cp):
    start(cp, "1", "john", ["workers-0", "workers-1"])
    start(cp, "2", "smith", ["workers-2", "workers-3"])
    groups_of = {f"workers-{i}": "workers" for i in range(4)}
    got = {(s.kind, s.name): s for s in current_samples(cp, groups_of)}
    g = got[(GROUP, "workers")]
    assert (g.acc, g.cap_acc, g.nodes, g.healthy_nodes) == (16, 16, 4, 4)
    assert g.vcpu == 192 and g.cap_vcpu == 192
    john, smith = got[(TEAM, "john")], got[(TEAM, "smith")]
    assert (john.acc, john.cap_acc, john.borrowed, john.lent) == (8, 12, 0, 4)
    assert (smith.acc, smith.cap_acc, smith.borrowed, smith.lent) == (8, 4, 4, 0)


def test_sampler_writes_on_change_at_most_every_min_interval_and_a_heartbeat(cp):
    s = UsageSampler(min_interval=2, heartbeat=60)
    s.tick(cp)  # first sample
    assert s.samples_written == 1
    cp.now.t += 1
    s.tick(cp)  # nothing changed
    start(cp, "1", "john", ["workers-0"])
    s.tick(cp)  # changed, but only 1 s after the last sample
    assert s.samples_written == 1
    cp.now.t += 1.5
    s.tick(cp)
    assert s.samples_written == 2
    cp.now.t += 30
    s.tick(cp)
    assert s.samples_written == 2
    cp.now.t += 31
    s.tick(cp)  # heartbeat
    assert s.samples_written == 3
    rows = cp.store.list_usage(0, 10**10)
    assert sorted({r.ts for r in rows}) == [1000.0, 1002.5, 1063.5]
    john = [r for r in rows if r.kind == TEAM and r.name == "john"]
    assert [r.acc for r in john] == [0, 4, 4]
    cp.cycles, cp.cycle_seconds = 1, 0.003
    s.tick(cp)
    assert s.cycles.total == 1 and s.cycles.counts[s.cycles.buckets.index(0.005)] == 1


def test_list_usage_gives_back_every_field_as_written(cp):
    """list_usage builds each sample from its columns in UsageSample's order: a field out of place (or one
    added to the sample and not to the columns) comes back different."""
    fields = ("acc", "vcpu", "memory_gib", "cap_acc", "cap_vcpu", "cap_memory_gib", "borrowed", "lent", "nodes",
              "healthy_nodes")
    written = [UsageSample(GROUP, "g", "t1", **{f: float(i + 1) for i, f in enumerate(fields)}, ts=5.0),
               UsageSample(TEAM, "a", "t2", acc=2, cap_acc=4, borrowed=1, lent=3, ts=5.0)]
    cp.store.append_usage(5.0, written)
    assert cp.store.list_usage(0, 10) == written


def test_list_usage_starts_with_the_sample_in_force(cp):
    cp.store.append_usage(100, [team("a", 0, 1, 1)])
    cp.store.append_usage(200, [team("a", 0, 2, 2)])
    cp.store.append_usage(300, [team("a", 0, 3, 3)])
    assert [r.acc for r in cp.store.list_usage(250, 1000)] == [2, 3]
    assert cp.store.usage_span() == (100, 300)
    assert cp.store.prune_usage(150) == 1


def test_the_sampler_rolls_its_samples_up_and_the_history_reads_what_every_sample_gives(cp):
    # 3 hours of turns 5 s apart, john's job starting and ending every 100 s: a sample at each change, and the
    # sampler's roll-up every 30 s of samples (the samples are kept 2 h after it: so the oldest are deleted)
    s = UsageSampler(min_interval=2, heartbeat=60)
    written = []
    for i in range(3 * 3600 // 5):
        if i % 20 == 0:
            start(cp, f"w{i}", "john", ["workers-0", "workers-1"][: 1 + i % 40 // 20])
        elif i % 20 == 10:
            cp.snap.finish(f"w{i - 10}")
        before = s.samples_written
        s.tick(cp)
        if s.samples_written > before:
            written += [replace(x, ts=cp.now.t) for x in s.last]
        cp.now.t += 5
    assert cp.store.rollup_marks()[30] >= cp.now.t - 120  # rolled up as it went (every 30 s of samples)
    assert cp.store.list_usage(0, 10**10)[0].ts > 1000.0 + 3000  # the first hour's samples are deleted
    cp.usage, cp.lock = s, threading.Lock()
    for window in ("1h", "6h"):
        got = history(cp, window, None)
        edges = [*got["times"], got["to"]]
        want = integrate(written, edges, got["to"])
        john = next(t for t in got["teams"] if t["team"] == "john")
        assert john["in_use"] == want.mean((TEAM, "john", "ml.g5.12xlarge"), "acc")
        assert any(john["in_use"]) and got["groups"][0]["acc"] == want.mean((GROUP, "workers", "ml.g5.12xlarge"),
                                                                             "acc")
