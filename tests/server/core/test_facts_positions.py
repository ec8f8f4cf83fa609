"""The queue positions a turn publishes (``Facts.positions``, the dashboard's tasks page while a turn runs) and
those read live (``LiveFacts.positions``, while the core is free) are the engine's queue order
(``PendingQueue.in_order``) for every team, whatever was pushed, discarded or popped before, and copies kept
from an earlier turn where a team's queue did not change are still right."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fairpod.server.core.facts import Facts, LiveFacts
from fairpod.server.core.published import AsOf

from ...governance.helpers import make, submit

OPS = st.lists(st.tuples(st.sampled_from(["submit", "cancel", "cycle"]), st.integers(0, 3), st.integers(0, 40)),
               min_size=1, max_size=60)


@settings(max_examples=100, deadline=None)
@given(ops=OPS, priorities=st.lists(st.sampled_from([-1, 10, 50, 90]), min_size=60, max_size=60))
def test_published_and_live_positions_are_the_queue_order(ops: list[tuple[str, int, int]],
                                                          priorities: list[int]) -> None:
    from fairpod.governance import schedule

    snap = make(2, [{"name": "a", "quota": 4}, {"name": "b", "quota": 4}], task_prioritization="TaskRanking")
    facts: Facts | None = None
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
        facts = Facts.publish(snap, AsOf(i, float(i)), facts, None)
        live = LiveFacts(snap, AsOf(i, float(i)), None, facts)
        assert sorted(facts.teams()) == sorted(live.teams()) == sorted(snap.teams)
        for name, team in snap.teams.items():
            want = {w.id: p for p, w in enumerate(team.queue.in_order(), 1)}
            assert facts.positions(name) == want == live.positions(name), name
    assert facts is not None and facts.positions("nobody") == {}
