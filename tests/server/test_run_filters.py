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


def _varied(n: int, seed: int) -> dict[int, Run]:
    runs = _runs(n, seed)
    rng = random.Random(seed + 100)
    for r in runs.values():
        r.ready_at = 1.0 if rng.random() < 0.3 else None
    return runs


def test_readiness_looks_at_what_its_loop_looked_at() -> None:
    from fairpod.server.core.transitions.readiness import _awaited, to_look

    for seed in range(5):
        runs = _varied(3000, seed)
        rng = random.Random(seed)
        unchecked = {j: r.attempt if rng.random() < 0.8 else r.attempt + 1 for j, r in runs.items()
                     if rng.random() < 0.9}
        unchecked[-1] = 0  # an attempt gone from the runs
        loop = [(jid, run) for jid, run in runs.items()  # the keeper's loop before
                if unchecked.get(jid) != run.attempt and _awaited(run)]
        assert to_look(runs, unchecked) == loop and loop


def test_log_rules_look_at_what_their_loop_looked_at() -> None:
    from fairpod.server.core.transitions.logrules import to_look

    for seed in range(5):
        runs = _runs(3000, seed)
        rng = random.Random(seed)
        watches: dict = {j: (None if rng.random() < 0.8 else object()) for j in runs if rng.random() < 0.9}
        loop = []  # the keeper's loop before
        for jid, run in runs.items():
            if not run.launched or run.stopping is not None:
                continue
            if jid in watches and watches.get(jid) is None:
                continue
            loop.append((jid, run))
        assert to_look(runs, watches) == loop and loop


def test_the_watchdog_judges_what_its_loop_judged() -> None:
    from fairpod.server.core.transitions.watchdog import live_attempts, unjudged

    for seed in range(5):
        runs = _runs(3000, seed)
        rng = random.Random(seed)
        live = {jid: run.attempt for jid, run in runs.items() if run.launched and run.stopping is None}
        assert live_attempts(runs) == live and list(live_attempts(runs)) == list(live)
        watched = {j: (a if rng.random() < 0.8 else a + 1, rng.random() < 0.5) for j, a in live.items()
                   if rng.random() < 0.9}
        new = sorted(jid for jid, att in live.items() if watched.get(jid, (None,))[0] != att)
        assert unjudged(live, watched) == new and new
