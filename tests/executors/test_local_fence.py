"""The local executor asks its fence (``set_fence``, set by ``fairpod up --ha`` through ``FencedExecutor``) right
before it starts processes or writes a stop, inside its own lock: a control plane paused after its first check
and continued past its lease starts nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fairpod.executors import ExecutorError, LocalExecutor, state
from fairpod.server.ha.leader import FencedExecutor

from .helpers import job, kill_recorded, wait_for


class Lease:
    """A FAKE elector (tests only): holds or not, as the test says."""

    def __init__(self) -> None:
        self.held = True
        self.refused: list[str] = []

    def check_action(self, what: str) -> None:
        if not self.held:
            self.refused.append(what)
            raise ExecutorError(f"{what} refused: this control plane no longer leads")


def test_a_lease_lost_after_the_first_check_starts_and_stops_nothing(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    ex = LocalExecutor(root, exclusive=False)
    lease = Lease()
    fenced: Any = FencedExecutor(ex, lease)  # type: ignore[arg-type]
    try:
        fenced.launch(job("a", ["sleep", "30"], tmp_path))
        wait_for(lambda: (root / "a" / "0" / "0" / state.CHILD_PID).exists())
        real_spawn = ex._spawn

        def lost_meanwhile(*a: Any, **kw: Any) -> None:  # the lease runs out between the two checks
            raise AssertionError("spawned without the lease")

        original = ex._free_port

        def pause(taken: set[int]) -> int:  # the control plane checked, then paused past its lease here
            lease.held = False
            return original(taken)

        ex._free_port = pause  # type: ignore[method-assign]
        ex._spawn = lost_meanwhile  # type: ignore[method-assign]
        with pytest.raises(ExecutorError, match="no longer leads"):
            fenced.launch(job("b", ["sleep", "30"], tmp_path))
        assert lease.refused == ["launch"] and not (root / "b" / "0" / "0" / state.LAUNCH).exists()
        ex._spawn = real_spawn  # type: ignore[method-assign]
        with pytest.raises(ExecutorError, match="no longer leads"):
            ex.stop("a", 0, 1.0)  # as a stop whose first check passed before the pause
        assert not (root / "a" / "0" / "0" / state.STOP).exists()
        lease.held = True
        ex.stop("a", 0, 1.0)
        assert (root / "a" / "0" / "0" / state.STOP).exists()
    finally:
        ex.close()
        kill_recorded(root)
