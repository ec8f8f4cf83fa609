"""Quota-bound jobs (``Workload.quota_bound``, a service's minimum replicas): admitted only within the team's quota,
never by borrowing; replicas above the minimum may borrow and go first; a reclaim takes the team's other borrowed
work before it. Each case runs twice, the job quota-bound or not: a job that is not quota-bound is decided as before.
"""

from __future__ import annotations

import pytest

from fairpod.governance import Workload
from fairpod.governance.decisions import Shrink, net_changes

from .helpers import T, admitted, cycle, make, per, preempted, waits


def job(snap, jid: str, team: str, lo: int, hi: int = 0, *, t: float = 0.0, bound: bool = False,
        prio: int = -1) -> Workload:
    w = Workload(jid, team, T, lo, per(4), priority=prio, submit=t, min_n=lo if hi else 0, max_n=hi,
                 quota_bound=bound)
    snap.add_pending(w)
    return w


def borrows_for_its_minimum(bound: bool) -> dict:
    # team a has 2 nodes of quota, b lends 2 idle ones; a service asks for 3 at least
    snap = make(4, [{"name": "a", "quota": 8}, {"name": "b", "quota": 8}])
    job(snap, "s", "a", 3, 4, bound=bound)
    ds = cycle(snap, 0)
    return {"admitted": admitted(ds), "waits": sorted(waits(ds))}


def grows_above_its_minimum_by_borrowing(bound: bool) -> dict:
    snap = make(4, [{"name": "a", "quota": 8}, {"name": "b", "quota": 8}])
    s = job(snap, "s", "a", 2, 4, bound=bound)
    cycle(snap, 0)
    return {"n": s.n}


def shrinks_to_its_minimum_on_reclaim(bound: bool) -> dict:
    snap = make(4, [{"name": "a", "quota": 8}, {"name": "b", "quota": 8}])
    s = job(snap, "s", "a", 2, 4, bound=bound)
    cycle(snap, 0)
    job(snap, "b1", "b", 2, t=1)
    ds = net_changes(cycle(snap, 1))
    return {"n": s.n, "shrunk": [d.job for d in ds if isinstance(d, Shrink)], "preempted": preempted(ds),
            "admitted": admitted(ds)}


def reclaim_takes_the_teams_other_borrowed_job_first(bound: bool) -> dict:
    # team a runs x (2 nodes, started first) and s (2 nodes, started later, so it would lose less work): a borrows
    # 2 nodes of b's quota; b reclaims 2
    snap = make(4, [{"name": "a", "quota": 8}, {"name": "b", "quota": 8}])
    x = job(snap, "x", "a", 2)
    cycle(snap, 0)
    s = Workload("s", "a", T, 2, per(4), submit=5.0, quota_bound=bound)
    free = [n for n in snap.nodes if n not in (x.nodes or [])]
    snap.assign(s, free)
    s.started = 5.0
    job(snap, "b1", "b", 2, t=10)
    ds = net_changes(cycle(snap, 10))
    return {"preempted": preempted(ds), "admitted": admitted(ds)}


def shrinks_its_own_team_to_run_within_quota(bound: bool) -> dict:
    # team a's elastic job e grew to 3 nodes (1 borrowed); a service of a's of higher priority needs 1 node
    snap = make(4, [{"name": "a", "quota": 8}, {"name": "b", "quota": 8}])
    e = job(snap, "e", "a", 1, 3)
    cycle(snap, 0)
    assert e.n == 3
    job(snap, "s", "a", 1, 2, t=1, bound=bound, prio=90)
    ds = net_changes(cycle(snap, 1))
    s = snap.running.get("s")
    return {"admitted": admitted(ds), "e": e.n, "s": s.n if s else 0}


CASES = [
    # (case, as before (not quota-bound), quota-bound)
    (borrows_for_its_minimum, {"admitted": ["s"], "waits": []}, {"admitted": [], "waits": ["s"]}),
    (grows_above_its_minimum_by_borrowing, {"n": 4}, {"n": 4}),
    (shrinks_to_its_minimum_on_reclaim, {"n": 2, "shrunk": ["s"], "preempted": [], "admitted": ["b1"]},
     {"n": 2, "shrunk": ["s"], "preempted": [], "admitted": ["b1"]}),
    (reclaim_takes_the_teams_other_borrowed_job_first, {"preempted": ["s"], "admitted": ["b1"]},
     {"preempted": ["x"], "admitted": ["b1"]}),
    # not quota-bound: s starts on the idle 4th node, borrowing; quota-bound: e gives back its borrowed replica
    # and one more, so that s's minimum runs within a's quota; s's second replica then borrows the node freed
    (shrinks_its_own_team_to_run_within_quota, {"admitted": ["s"], "e": 3, "s": 1},
     {"admitted": ["s"], "e": 1, "s": 2}),
]


@pytest.mark.parametrize(("case", "plain", "bound"), CASES, ids=[c[0].__name__ for c in CASES])
def test_quota_bound_table(case, plain, bound):
    assert case(False) == plain
    assert case(True) == bound


def test_its_wait_says_why():
    snap = make(4, [{"name": "a", "quota": 8}, {"name": "b", "quota": 8}])
    job(snap, "s", "a", 3, 4, bound=True)
    why = waits(cycle(snap, 0))["s"]
    assert "within team a's quota" in why and "never on borrowed capacity" in why
