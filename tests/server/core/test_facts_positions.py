"""The queue positions a turn publishes (``Facts.positions``, the dashboard's tasks page while a turn runs) and
those read live (``LiveFacts.positions``, while the core is free) are the engine's queue order
(``PendingQueue.in_order``) for every team, whatever was pushed, discarded or popped before, and copies kept
from an earlier turn where a team's queue did not change are still right."""

from __future__ import annotations

from hypothesis import given, settings

from fairpod.server.core.facts import Facts, LiveFacts
from fairpod.server.core.published import AsOf

from ...governance.helpers import QUEUE_OPS, QUEUE_PRIORITIES, play_queue


@settings(max_examples=100, deadline=None)
@given(ops=QUEUE_OPS, priorities=QUEUE_PRIORITIES)
def test_published_and_live_positions_are_the_queue_order(ops: list[tuple[str, int, int]],
                                                          priorities: list[int]) -> None:
    facts: Facts | None = None
    for i, snap in play_queue(ops, priorities):
        facts = Facts.publish(snap, AsOf(i, float(i)), facts, None)
        live = LiveFacts(snap, AsOf(i, float(i)), None, facts)
        assert sorted(facts.teams()) == sorted(live.teams()) == sorted(snap.teams)
        for name, team in snap.teams.items():
            want = {w.id: p for p, w in enumerate(team.queue.in_order(), 1)}
            assert facts.positions(name) == want == live.positions(name), name
    assert facts is not None and facts.positions("nobody") == {}
