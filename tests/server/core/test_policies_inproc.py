"""Policies through a ControlPlane built in-process (real SQLite store, the timed executor, a FAKE clock):
FairShareHistory kept across restarts (a clean stop and a crash), the submitting user recorded from the
caller and the per-user cap, a lending limit on the seed cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fairpod.model.jobs import JobSpec, JobState
from fairpod.model.spec import parse_spec
from fairpod.server.api.routes_reports import usage_report
from fairpod.server.core.history import KEY
from fairpod.server.runtime.wiring import control_plane

from ..inproc import SEED_SPEC, InProc

T = "ml.g5.12xlarge"


def _spec(tmp: Path, **edit: object) -> Path:
    doc = yaml.safe_load(SEED_SPEC.read_text())
    doc["policy"].update(idle_compute_allocation="FairShareHistory", fair_share_half_life_seconds=3600)
    for team, patch in edit.items():
        t = next(t for t in doc["teams"] if t["name"] == team)
        for k, v in patch.items():  # type: ignore[attr-defined]
            if isinstance(v, dict):
                t.setdefault(k, {}).update(v)
            else:
                t[k] = v
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def h(tmp_path: Path) -> Iterator[InProc]:
    h = InProc(tmp_path, _spec(tmp_path, smith={"user_limits": {"max_running_accelerators": 4}}))
    yield h
    h.close()


def _borrow_for_an_hour(h: InProc) -> float:
    for i in range(4):  # john: 3 nodes of quota, the 4th borrowed from smith (borrow limit 50 %)
        h.submit(f"j{i}", "john", 100_000)
    h.turn()
    assert [h.job(f"j{i}").state for i in range(4)] == [JobState.RUNNING] * 4
    h.clock.advance(3600)
    h.turn()
    hist = h.cp.snap.teams["john"].history[T]
    assert hist == pytest.approx(0.25 * 0.5)  # borrowed 4 of 16 lendable for one half-life
    return hist


def test_history_survives_a_clean_restart(h: InProc) -> None:
    hist = _borrow_for_an_hour(h)
    h.cp.stop()  # saves the history
    h.cp = control_plane(h.store, h.executor, h.tmp, clock=h.clock)
    assert h.cp.snap.teams["john"].history[T] == pytest.approx(hist)
    h.clock.advance(3600)
    h.turn()  # john still borrows: the mean moves on towards 0.25
    assert h.cp.snap.teams["john"].history[T] == pytest.approx(0.25 * 0.75)


def test_history_survives_a_crash(h: InProc) -> None:
    _borrow_for_an_hour(h)
    saved = h.store.get_meta(KEY)
    assert saved and '"john"' in saved
    h.clock.advance(2)  # a turn within the save interval: not written again
    h.turn()
    assert h.store.get_meta(KEY) == saved
    # no stop: the new control plane starts from the last save and folds in the time since with its shares
    h.cp = control_plane(h.store, h.executor, h.tmp, clock=h.clock)
    h.turn()
    assert h.cp.snap.teams["john"].history[T] == pytest.approx(0.25 * (1 - 0.5 * 2 ** (-2 / 3600)))


def test_bad_saved_history_starts_empty(h: InProc) -> None:
    h.store.set_meta(KEY, "{not json")
    h.cp = control_plane(h.store, h.executor, h.tmp, clock=h.clock)
    assert h.cp.snap.teams["john"].history == {}


def test_user_is_the_caller_and_the_cap_holds(h: InProc) -> None:
    # smith: 1 node of quota, may borrow 100 %; at most 4 accelerators (one node) per user
    for name, actor in (("a1", "ann"), ("a2", "ann"), ("b1", "bob")):
        h.cp.submit(JobSpec(name=name, team="smith", command=["sleep", "1000"], user="mallory"), actor)
    h.turn()
    assert {n: (h.job(n).spec.user, h.job(n).state) for n in ("a1", "a2", "b1")} == {
        "a1": ("ann", JobState.RUNNING), "a2": ("ann", JobState.PENDING), "b1": ("bob", JobState.RUNNING)}
    assert h.job("a2").reason == "per-user cap: user ann runs 4 accelerators in team smith, the job needs 4 more " \
                                 "and the cap is 4"
    h.clock.advance(1000)
    h.turn(2)
    assert h.job("a1").state == JobState.SUCCEEDED and h.job("a2").state == JobState.RUNNING


def test_lending_limit_keeps_quota_for_the_lender(tmp_path: Path) -> None:
    # john lends at most 1 node of his 3: smith (1 node of quota, borrow limit 100 %) borrows one node only
    h = InProc(tmp_path, _spec(tmp_path, john={"sharing": {"lending_limits": [{"instance_type": T, "count": 1}]}},
                               smith={"sharing": {"borrow_limit": 300}}))
    try:
        for i in range(4):
            h.submit(f"s{i}", "smith", 1000)
        h.turn()
        states = [h.job(f"s{i}").state for i in range(4)]
        assert states.count(JobState.RUNNING) == 2
        assert "no idle ml.g5.12xlarge capacity to borrow" in h.job("s2").reason
        # john's 2 nodes kept back start at once, without reclaiming anything
        h.submit("j0", "john", 1000)
        h.submit("j1", "john", 1000)
        h.turn()
        assert h.job("j0").state == h.job("j1").state == JobState.RUNNING
        assert not h.events(kind="JobPreempted")
    finally:
        h.close()


def _minutes(h: InProc, n: int) -> None:
    for _ in range(n):  # a turn a minute, as the live loop samples usage at least every minute
        h.clock.advance(60)
        h.turn()


def test_budget_counts_hours_holds_borrowing_and_survives_a_restart(tmp_path: Path) -> None:
    h = InProc(tmp_path, _spec(tmp_path, john={"budgets": [{"instance_type": T, "period": "day",
                                                            "accelerator_hours": 24}]}))
    try:
        for i in range(3):
            h.submit(f"j{i}", "john", 100_000)
        h.turn()
        _minutes(h, 60)
        assert h.cp.snap.teams["john"].budget[T] == pytest.approx((12.0, 24.0, False))
        h.submit("borrow-early", "john", 100_000)  # 50 %: may borrow
        h.turn()
        assert h.job("borrow-early").state == JobState.RUNNING
        _minutes(h, 36)  # 12 + 16 x 0.6 = 21.6 h: past 80 %
        (row,) = h.cp.budgets.rows(h.cp)
        assert row["state"] == "lowest priority" and row["used_hours"] == pytest.approx(21.6)
        h.cp.cancel(h.job("borrow-early"), "tester")
        _minutes(h, 3)
        used = h.cp.snap.teams["john"].budget[T][0]
        _minutes(h, 15)  # 12 more h: past 100 %
        h.submit("borrow-late", "john", 100_000)
        h.turn()
        assert h.job("borrow-late").state == JobState.PENDING
        assert h.job("borrow-late").reason.startswith("budget spent: team john used")
        # a new control plane counts the day again from the usage samples
        before = h.cp.snap.teams["john"].budget[T][0]
        h.cp = control_plane(h.store, h.executor, h.tmp, clock=h.clock)
        h.turn()
        assert h.cp.snap.teams["john"].budget[T][0] == pytest.approx(before, rel=0.02)
        assert before > used
        assert h.job("borrow-late").state == JobState.PENDING
        # a spec change (a new engine snapshot) keeps the count, so the budget still holds
        doc = h.cp.spec.model_dump(mode="json")
        doc["teams"][1]["fair_share_weight"] = 50
        h.cp.replace_spec(parse_spec(doc))
        assert h.cp.snap.teams["john"].budget[T][0] == pytest.approx(before, rel=0.02)
        h.turn()
        assert h.job("borrow-late").state == JobState.PENDING
        rep = usage_report(h.cp, h.clock() - 86400, h.clock(), None)
        assert [(b["team"], b["period"], b["state"]) for b in rep["budgets"]] == [("john", "day", "no borrowing")]
    finally:
        h.close()
