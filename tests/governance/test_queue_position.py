"""A pending job's place in its team's queue (``PendingQueue.position``, shown by get-job) is its index in
``in_order()``, whatever was pushed, discarded or popped before."""

from __future__ import annotations

from hypothesis import given, settings

from .helpers import QUEUE_OPS, QUEUE_PRIORITIES, play_queue


@settings(max_examples=150, deadline=None)
@given(ops=QUEUE_OPS, priorities=QUEUE_PRIORITIES)
def test_position_is_the_index_in_queue_order(ops: list[tuple[str, int, int]], priorities: list[int]) -> None:
    snap = None
    for _, snap in play_queue(ops, priorities):
        for team in snap.teams.values():
            order = [w.id for w in team.queue.in_order()]
            assert [team.queue.position(w) for w in order] == list(range(1, len(order) + 1))
    assert snap is not None
    assert all(snap.teams[w.team].queue.position("nope") is None for w in snap.pending.values())
