"""A pending job's place in its team's queue (``PendingQueue.position``, shown by get-job) is its index in
``in_order()``, whatever was pushed, discarded or popped before."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from .helpers import make, submit

OPS = st.lists(st.tuples(st.sampled_from(["submit", "cancel", "cycle"]), st.integers(0, 3), st.integers(0, 40)),
               min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, priorities=st.lists(st.sampled_from([-1, 10, 50, 90]), min_size=60, max_size=60))
def test_position_is_the_index_in_queue_order(ops: list[tuple[str, int, int]], priorities: list[int]) -> None:
    from fairpod.governance import schedule

    snap = make(2, [{"name": "a", "quota": 4}, {"name": "b", "quota": 4}], task_prioritization="TaskRanking")
    n = 0
    for i, (op, acc, k) in enumerate(ops):
        if op == "submit":
            n += 1
            submit(snap, f"j{n}", "ab"[k % 2], acc + 1, t=float(i), prio=priorities[i])
        elif op == "cancel" and snap.pending:
            snap.remove_pending(sorted(snap.pending)[k % len(snap.pending)])
        elif op == "cycle":
            snap.now = float(i)
            schedule(snap)
        for team in snap.teams.values():
            order = [w.id for w in team.queue.in_order()]
            assert [team.queue.position(w) for w in order] == list(range(1, len(order) + 1))
    assert all(snap.teams[w.team].queue.position("nope") is None for w in snap.pending.values())
