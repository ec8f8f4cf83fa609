"""The control plane's clock (fairpod.server.runtime.steadyclock): a step of the wall clock does not move it, a restart on
the same boot goes on with the same timeline (elapsed time kept), a new boot anchors again."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fairpod.server.runtime import steadyclock
from fairpod.server.runtime.steadyclock import SteadyClock, control_clock


def test_a_wall_step_moves_nothing_and_a_restart_keeps_the_timeline(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    first = SteadyClock(tmp_path)
    t0 = first()
    assert abs(t0 - time.time()) < 1.0  # anchored to the wall clock at the first start of this boot
    real = time.time
    monkeypatch.setattr(steadyclock.time, "time", lambda: real() + 3600.0)  # the host's clock steps an hour ahead
    assert 0 <= first() - t0 < 5.0
    again = SteadyClock(tmp_path)  # the control plane restarts after the step, on the same boot
    assert (again.wall, again.mono) == (first.wall, first.mono) and 0 <= again() - t0 < 5.0
    assert abs(again.from_wall(time.time()) - again()) < 1.0  # a wall time read now is now on its timeline


def test_a_new_boot_anchors_again_and_the_wall_clock_may_be_asked_for(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / steadyclock.FILE).write_text(json.dumps({"wall": 1.0, "mono": 0.0, "boot_id": "another-boot"}))
    clock = SteadyClock(tmp_path)
    assert abs(clock() - time.time()) < 1.0
    assert json.loads((tmp_path / steadyclock.FILE).read_text())["boot_id"] == steadyclock.boot_id()
    monkeypatch.setenv(steadyclock.ENV, "wall")
    assert control_clock(tmp_path) is None
