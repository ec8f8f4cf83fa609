"""``ordering.sort_victims`` (what preemption planning sorts its candidates with) gives exactly the order of
``ordering.victim_key``, the documented victim order, whatever the jobs' teams, shares, budgets and times."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fairpod.governance.ordering import sort_victims, victim_key
from fairpod.governance.workload import Workload
from fairpod.model.resources import Res

TEAMS = ["a", "b", "c"]
times = st.one_of(st.none(), st.sampled_from([0.0, 5.0, 10.0, 20.0, 30.0]))


@st.composite
def jobs(draw: st.DrawFn) -> list[Workload]:
    out = []
    for i in range(draw(st.integers(0, 12))):
        w = Workload(f"j{i:02d}", draw(st.sampled_from(TEAMS)), "t", 1, Res(draw(st.integers(0, 2)), 0, 0),
                     priority=draw(st.integers(-1, 3)), seq=draw(st.integers(1, 4)))
        w.started = draw(times)
        w.checkpoint = draw(times)
        w.preemptions = draw(st.integers(0, 6))
        out.append(w)
    return out


@settings(max_examples=300, deadline=None)
@given(jobs(), st.sampled_from(TEAMS), st.dictionaries(st.sampled_from(TEAMS), st.sampled_from([0.0, 0.5, 2.0])),
       st.sets(st.sampled_from(TEAMS)), st.sampled_from([0.0, 15.0, 40.0]))
def test_sort_victims_gives_the_order_of_victim_key(cands, preemptor, shares, demoted, now):
    def share(name: str) -> float:
        return shares.get(name, 0.0)

    def priority(v: Workload) -> int:
        return -2 if v.team in demoted else v.priority

    want = sorted(cands, key=victim_key(preemptor, now, share, priority))
    got = list(cands)
    sort_victims(got, preemptor, now, share, lambda name: -2 if name in demoted else None)
    assert [v.id for v in got] == [v.id for v in want]
