"""``/metrics``' pending jobs by team and status (``pending_counts``) agree with a count job by job, on queues the
engine really decided on: the jobs it tried carry its reasons (inadmissible), the others none (active)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fairpod.server.api.metrics import inadmissible, pending_counts
from tests.governance.helpers import cycle, make, submit


def by_job(snap) -> dict[str, list[int]]:
    out = {name: [0, 0, 0] for name in snap.teams}
    for w in snap.pending.values():
        out[w.team][1 if inadmissible(w.reason) else 0] += 1
    return out


@settings(max_examples=60, deadline=None)
@given(jobs=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from([1, 2, 4]),
                               st.booleans()), max_size=60))
def test_the_counts_agree_with_a_count_job_by_job(jobs: list[tuple[str, int, bool]]) -> None:
    snap = make(4, [{"name": "a", "quota": 4}, {"name": "b", "quota": 4}, {"name": "c", "quota": 0},
                        {"name": "idle", "quota": 4}])
    for i, (team, acc, after) in enumerate(jobs):
        if not after:  # before the first cycle: tried by it
            submit(snap, f"j{i}", team, acc, t=float(i))
    cycle(snap, now=100.0)
    for i, (team, acc, after) in enumerate(jobs):
        if after:  # after it: not tried yet
            submit(snap, f"j{i}", team, acc, t=100.0 + i)
    assert pending_counts(snap) == by_job(snap)


def test_both_classes_are_counted_whichever_is_smaller() -> None:
    snap = make(1, [{"name": "a", "quota": 4}, {"name": "b", "quota": 0}])
    for i in range(6):
        submit(snap, f"x{i}", "a", 4, t=float(i))
    cycle(snap, now=10.0)  # x0 admitted, x1 tried (no idle capacity), x2..x5 behind it, not tried
    submit(snap, "new", "b", 1, t=11.0)
    assert pending_counts(snap) == by_job(snap) == {"a": [4, 1, 0], "b": [1, 0, 0]}
    for w in list(snap.pending.values())[:4]:  # as the engine words them: now the tried are the larger class
        w.reason = "waiting for capacity: stand-in reason of this test"
    assert pending_counts(snap) == by_job(snap) == {"a": [1, 4, 0], "b": [1, 0, 0]}
