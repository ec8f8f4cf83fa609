"""The turn's keepers pick the live attempts they act on with filters that run in C (``runs.having``/``lacking``,
the readiness, watchdog and log-rule keepers' maps): the same attempts, in the same order, as the Python loops
they replace (what each keeper then does is covered by its own tests)."""

from __future__ import annotations

import random

from fairpod.server.runs import Run, having, lacking


def _runs(n: int, seed: int) -> dict[int, Run]:
    rng = random.Random(seed)
    out: dict[int, Run] = {}
    for i in rng.sample(range(10 * n), n):  # ids not in order: the dict's order is kept, not the ids'
        out[i] = Run(attempt=rng.randrange(3), launched=rng.random() < 0.9,
                     stopping=rng.choice([None, None, None, "preempt"]),
                     restart_due=[1] if rng.random() < 0.05 else [],
                     adding=[2, 3] if rng.random() < 0.05 else [])
    return out


def test_having_and_lacking_pick_what_a_loop_picks_in_its_order() -> None:
    for seed in range(5):
        runs = _runs(2000, seed)
        for name in ("launched", "restart_due", "adding", "stopping"):
            assert having(runs, name) == [(j, r) for j, r in runs.items() if getattr(r, name)]
            assert lacking(runs, name) == [(j, r) for j, r in runs.items() if not getattr(r, name)]
    assert having({}, "launched") == [] and lacking({}, "launched") == []


def test_the_pick_is_a_list_a_keeper_may_change_the_runs_under() -> None:
    runs = _runs(100, 9)
    picked = lacking(runs, "launched")
    for jid, _ in picked:
        runs.pop(jid)  # a keeper that ends attempts while it walks them (as _ready's callers may)
    assert all(r.launched for r in runs.values())
