"""Writing a replica's exit on a disk that may be full: the supervisor keeps the exit and retries until it fits
(it stays alive meanwhile, so the executor sees the replica as still ending, also after a restart of the control
plane), instead of dying with it and leaving "supervisor died unexpectedly"."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

from fairpod.executors import state

PATIENCE = 7 * 86400.0  # seconds: how long a supervisor waits for space before it gives up
_FULL = (errno.ENOSPC, errno.EDQUOT)


def write_json(path: Path, data: dict[str, Any], patience: float = PATIENCE) -> None:
    """``state.write_json``, retried (every 0.2 s, then up to every 5 s) while the disk is full."""
    deadline = time.monotonic() + patience
    pause = 0.2
    while True:
        try:
            state.write_json(path, data)
            return
        except OSError as e:
            if e.errno not in _FULL or time.monotonic() >= deadline:
                raise
            try:
                os.unlink(path.with_name(f".{path.name}.{os.getpid()}.tmp"))  # the part that did not fit
            except OSError:
                pass
        time.sleep(pause)
        pause = min(5.0, pause * 2)
