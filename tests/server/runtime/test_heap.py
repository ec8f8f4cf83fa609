"""The server's heap and the cycle collector (``fairpod.server.runtime.heap``): the pauses timed, the collector off while
the memory is built, what is alive then frozen, and the keeper that freezes after a long full collection and
settles every so often. Each test leaves the collector as it found it (enabled, nothing frozen)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from fairpod.server.runtime import heap


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref[Node]:
    """A reference cycle nobody holds: only the cycle collector frees it."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture(autouse=True)
def clean_collector() -> Iterator[None]:
    yield
    gc.enable()
    gc.unfreeze()


def test_pauses_time_each_generation() -> None:
    pauses = heap.Pauses()
    gc.callbacks.append(pauses)
    try:
        gc.collect()
        gc.collect(0)
    finally:
        gc.callbacks.remove(pauses)
    count, seconds, longest = pauses.figures()
    assert count[2] == 1 and count[0] == 1 and seconds[2] > 0 and longest >= seconds[2] == pauses.last_full


def test_no_collection_while_building_then_settled() -> None:
    with heap.building():
        assert not gc.isenabled()
        dead = cycle()
        kept = Node()
    assert gc.isenabled() and dead() is not None  # nothing collected it meanwhile
    assert heap.settle() >= 0
    assert dead() is None  # settling collects first...
    assert gc.get_freeze_count() > 0  # ...then freezes what is alive
    assert any(o is kept for o in gc.get_objects()) is False  # frozen objects are out of the collector's lists
    del kept


def test_building_keeps_a_disabled_collector_disabled() -> None:
    gc.disable()
    with heap.building():
        pass
    assert not gc.isenabled()


def test_the_keeper_freezes_after_a_long_full_collection_and_settles_on_time() -> None:
    now = [0.0]
    pauses = heap.Pauses()
    keeper = heap.Heap(every=100.0, long=0.05, clock=lambda: now[0], pauses=pauses)
    keeper.tick()
    assert (keeper.frozen, keeper.settled, gc.get_freeze_count()) == (0, 0, 0)  # no long collection yet
    pauses.last_full = 0.2  # as after a full collection of 0.2 s
    keeper.tick()
    assert keeper.frozen == 1 and gc.get_freeze_count() > 0 and pauses.last_full == 0.0
    dead = cycle()
    gc.freeze()  # a cycle frozen before any collection found it: only a settle frees it
    gc.collect()
    assert dead() is not None
    now[0] = 100.0
    keeper.tick()
    assert keeper.settled == 1 and dead() is None and keeper.next == 200.0


def test_watch_sets_the_servers_thresholds_or_the_operators(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fairpod up`` (``watch``) runs the collector less often than Python's default (700, 10, 10), or as
    ``FAIRPOD_GC_THRESHOLDS`` says; a malformed value is one line naming the variable."""
    was, watched = gc.get_threshold(), heap.PAUSES in gc.callbacks
    try:
        monkeypatch.delenv("FAIRPOD_GC_THRESHOLDS", raising=False)
        heap.watch()
        assert gc.get_threshold() == heap.THRESHOLDS == (10_000, 20, 10)
        monkeypatch.setenv("FAIRPOD_GC_THRESHOLDS", "700,10,10")
        heap.watch()
        assert gc.get_threshold() == (700, 10, 10)
        for bad in ("700,10", "a,b,c", "0,10,10", "700, 10, 10,", "99999999,1,1"):
            monkeypatch.setenv("FAIRPOD_GC_THRESHOLDS", bad)
            with pytest.raises(SystemExit) as e:
                heap.watch()
            assert str(e.value) == ("fairpod: error: FAIRPOD_GC_THRESHOLDS must be three whole numbers from 1 to "
                                    f"10000000 separated by commas (as gc.set_threshold takes them), not {bad!r}")
    finally:
        gc.set_threshold(*was)
        if not watched and heap.PAUSES in gc.callbacks:
            gc.callbacks.remove(heap.PAUSES)
