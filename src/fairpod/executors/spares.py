"""The local executor's spares of replicas (recovery from peers, :mod:`fairpod.executors.standby`): one standby
supervisor forked beside each replica of a job with ``peer_recovery`` (its launch's ``spare``), handed the replica's
new launch when the replica is started again in place, so that the replacement's interpreter and imports are ready.
Without a fork server (``FAIRPOD_FORKSERVER=0``) there are no spares: replicas start afresh as before."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any, Protocol

from fairpod.executors import procs, standby, state
from fairpod.executors.forkclient import Forked, ForkServerClient


class _Local(Protocol):
    _forkserver: ForkServerClient
    _spares: dict[Path, Forked]


class Spares:
    """Mixed into :class:`fairpod.executors.local.LocalExecutor`."""

    def _arm_spare(self: _Local, rdir: Path, spec: dict[str, Any]) -> None:
        """Fork the standby of the replica just started in ``rdir``, when its job has one."""
        if standby.unfit(spec) is None:
            forked = self._forkserver.spawn(rdir, rdir / standby.LOG, standby=True)
            if forked is not None:
                self._spares[rdir] = forked

    def _take_spare(self: _Local, rdir: Path) -> Forked | None:
        """The live standby of ``rdir``, handed the launch just written there (None: there is none)."""
        (rdir / standby.GO_FILE).unlink(missing_ok=True)
        spare = self._spares.pop(rdir, None)
        if spare is None or spare.poll() is not None:
            return None
        state.write_atomic(rdir / standby.GO_FILE, f"{spare.pid}\n")
        if not procs.alive(spare.pid, spare.started):
            return None
        procs.signal_all([spare.pid], standby.GO)
        return spare

    def _drop_spare(self: _Local, rdir: Path) -> None:
        """SIGTERM to the standby of ``rdir`` (its rank is stopped): it ends with its spare."""
        spare = self._spares.pop(rdir, None)
        if spare is not None and spare.poll() is None:
            with contextlib.suppress(OSError):
                os.kill(spare.pid, signal.SIGTERM)
