"""The control plane's clock: wall-clock seconds that a step of the host's wall clock does not move.

Every duration rule of the control plane (runtime limits, hang and regroup timeouts, restart and readiness
backoffs, gang readiness, services' drains and restart backoffs, minimum run times, checkpoint waits, budgets'
periods) subtracts two readings of ``ControlPlane.clock``, often one stored with a job and one now. With the wall
clock (``time.time``), an NTP step of an hour ended healthy jobs (``runtime limit: the attempt ran 3619 s`` after
30 s; ``no output for 3603 s`` for a job printing every 4 s). This clock is the wall time at an anchor plus the
host's monotonic clock since then, so it advances exactly as time passes, whatever the wall clock does.

The anchor (``clock.json`` in ``$FAIRPOD_HOME``: the wall and monotonic readings, and the host's boot id) is kept
across restarts of the control plane: a control plane started again on the same boot of the host goes on with
the same timeline, so what a job has run so far is kept as elapsed time across the restart, not recomputed from
the wall clock. A new boot (the monotonic clock starts over) anchors again to the wall clock then. The times
fairpod shows (start times, events) are read on this clock: after a step of the host's wall clock they differ
from the wall clock by that step until the host boots again (``fairpod up`` logs the difference when it starts).
``FAIRPOD_CLOCK=wall`` uses the wall clock instead (the behaviour before this clock).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("fairpod.clock")

FILE = "clock.json"
ENV = "FAIRPOD_CLOCK"
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str | None:
    try:
        return Path(BOOT_ID).read_text().strip() or None
    except OSError:
        return None


class SteadyClock:
    """``clock()``: seconds on the timeline of the anchor kept in ``home`` (see the module doc)."""

    def __init__(self, home: Path) -> None:
        self.path = home / FILE
        boot = boot_id()
        rec = self._read()
        if rec is not None and boot is not None and rec.get("boot_id") == boot:
            self.wall, self.mono = float(rec["wall"]), float(rec["mono"])
        else:
            self.wall, self.mono = time.time(), time.monotonic()
            self._write(boot)
        off = time.time() - self()
        if abs(off) >= 1.0:
            log.warning("the host's wall clock is %+.0f s from fairpod's clock (a step since this boot's first "
                        "start): durations are measured on fairpod's clock, which the step did not move", off)

    def __call__(self) -> float:
        return self.wall + (time.monotonic() - self.mono)

    def from_wall(self, ts: float) -> float:
        """A wall-clock time (e.g. a replica's exit, read on its node) on this timeline, at today's offset."""
        return ts - (time.time() - self())

    def _read(self) -> dict[str, Any] | None:
        try:
            rec = json.loads(self.path.read_text())
            return rec if isinstance(rec, dict) and {"wall", "mono", "boot_id"} <= rec.keys() else None
        except (OSError, ValueError):
            return None

    def _write(self, boot: str | None) -> None:
        tmp = self.path.with_name(f".{FILE}.{os.getpid()}")
        try:
            tmp.write_text(json.dumps({"wall": self.wall, "mono": self.mono, "boot_id": boot}) + "\n")
            os.replace(tmp, self.path)
        except OSError as e:  # the clock still works; a restart anchors again
            log.warning("cannot keep the clock's anchor in %s: %s", self.path, e)


def control_clock(home: Path) -> SteadyClock | None:
    """The clock ``fairpod up`` gives the control plane: None (the wall clock) with ``FAIRPOD_CLOCK=wall``."""
    if (os.environ.get(ENV) or "").strip().lower() == "wall":
        return None
    return SteadyClock(home)
