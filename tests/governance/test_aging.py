"""Priority aging (``policy.priority_aging_per_hour`` / ``priority_aging_max``): a long-waiting low-priority job passes
newer higher-priority ones in its team's queue, by a bounded boost; it never preempts by it; off, the queue is by
priority as before."""

from __future__ import annotations

import pytest

from fairpod.governance import Workload, schedule
from fairpod.governance.build import snapshot_from_spec
from fairpod.governance.decisions import Admit, Preempt
from fairpod.model.resources import Res
from fairpod.model.spec import parse_spec

KT = "k1"


def snap_of(**policy):
    spec = parse_spec({
        "cluster": {"name": "c", "instance_groups": [{"name": "n", "instance_type": KT, "count": 1}]},
        "instance_types": [{"name": KT, "accelerators": 1, "vcpu": 4, "memory_gib": 16}],
        "policy": {"task_prioritization": "TaskRanking", **policy},
        "teams": [{"name": "a", "sharing": {"strategy": "DontLend"}, "quota": [{"instance_type": KT, "count": 1}]}],
    })
    return snapshot_from_spec(spec)


def run(snap, now: float, prio_of_hog: int = 5):
    """One node: 'hog' runs; 'old' (priority 1) waits from t=0, 'new' (priority 3) from t=7000; the hog ends at
    ``now``: which job starts?"""
    hog = Workload("hog", "a", KT, 1, Res(1, 4000, 16384), priority=prio_of_hog, submit=0.0)
    snap.add_pending(hog)
    schedule(snap)
    snap.add_pending(Workload("old", "a", KT, 1, Res(1, 4000, 16384), priority=1, submit=0.0))
    snap.now = 7000.0
    snap.add_pending(Workload("new", "a", KT, 1, Res(1, 4000, 16384), priority=3, submit=7000.0))
    schedule(snap)
    snap.now = now
    snap.finish("hog")
    return [d for d in schedule(snap) if isinstance(d, (Admit, Preempt))]


@pytest.mark.parametrize("rate, cap, now, first", [
    (0, 0, 7300.0, "new"),  # off: by priority
    (1, 5, 7300.0, "old"),  # old waited 2 h: 1 + 2 = 3, ties with new, and was submitted first
    (0.5, 5, 7300.0, "new"),  # 1 + 1 = 2 < 3
    (10, 1, 36000.0, "new"),  # bounded: at most 1 + 1 = 2 however long it waits
])
def test_a_long_waiting_job_passes_newer_higher_priority_ones(rate, cap, now, first):
    s = snap_of(priority_aging_per_hour=rate, priority_aging_max=cap)
    got = run(s, now)
    assert [d.job for d in got] == [first]


def test_a_boost_never_preempts():
    s = snap_of(priority_aging_per_hour=100, priority_aging_max=100)
    hog = Workload("hog", "a", KT, 1, Res(1, 4000, 16384), priority=5, submit=0.0)
    s.add_pending(hog)
    schedule(s)
    s.add_pending(Workload("old", "a", KT, 1, Res(1, 4000, 16384), priority=1, submit=0.0))
    s.now = 36000.0  # boosted to 101 > the hog's 5
    assert not [d for d in schedule(s) if isinstance(d, (Admit, Preempt))]


def test_aging_needs_task_ranking():
    with pytest.raises(ValueError, match="priority_aging_per_hour: needs task_prioritization: TaskRanking"):
        parse_spec(dict(cluster=dict(name="c", instance_groups=[]), teams=[],  # (no literal: not a corpus spec)
                        policy=dict(priority_aging_per_hour=1)))
