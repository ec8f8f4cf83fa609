"""The suite's wait (tests/server/conftest.py ``wait_for``) on a virtual clock: a slow progress measure does not
leave the condition unpolled, a stall still ends the wait after its timeout, and progress seen at the last moment
goes on."""

from __future__ import annotations

from typing import Any

import pytest

from tests.server import conftest


class VirtualTime:
    """A stand-in for the ``time`` module of conftest: ``monotonic`` reads a clock that only ``sleep`` and the
    test's own calls advance, so the waits below take no real time and do not depend on the machine's load."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualTime:
    vt = VirtualTime()
    monkeypatch.setattr(conftest, "time", vt)
    return vt


def test_a_slow_progress_measure_leaves_a_short_window_of_the_condition_seen(clock: VirtualTime):
    start = clock.now
    asked: list[float] = []

    def progress() -> int:  # 3 s a call, as Server.activity on a loaded machine; always changing (work goes on)
        asked.append(clock.now)
        clock.now += 3.0
        return len(asked)

    # true for 1.5 s only, 40 s into the wait (a step past a snapshot, before the next one moves the mark)
    def pred() -> Any:
        return "seen" if 40.0 <= clock.now - start < 41.5 else None

    assert conftest.wait_for(pred, 120, "the window", progress) == "seen"
    assert len(asked) <= 4  # at the start, then 15 s (120 / 8) apart


def test_a_stall_ends_the_wait_after_its_timeout_and_says_so(clock: VirtualTime):
    start = clock.now
    with pytest.raises(AssertionError, match=r"waiting for work \(no progress for 60 s; last progress: 7\)"):
        conftest.wait_for(lambda: None, 60, "work", lambda: 7)
    assert 60 <= clock.now - start < 61


def test_progress_seen_at_the_last_moment_goes_on(clock: VirtualTime):
    start = clock.now

    def progress() -> int:  # changes once, 59.9 s in: after the last regular ask (52.5 s), before the stall ends
        return 1 if clock.now - start < 59.9 else 2

    assert conftest.wait_for(lambda: clock.now - start >= 100 and "done", 60, "work", progress) == "done"


def test_without_progress_the_timeout_bounds_the_wait(clock: VirtualTime):
    start = clock.now
    with pytest.raises(AssertionError, match="timed out after 5 s waiting for nothing; last value: 0"):
        conftest.wait_for(lambda: 0, 5, "nothing")
    assert 5 <= clock.now - start < 5.3
