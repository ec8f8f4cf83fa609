"""Keeps the engine's FairShareHistory (``fairpod.governance.history``) across control-plane restarts.

The history is plain data in the store's meta table (key ``fairshare_history``, JSON), written every
``EVERY`` seconds by the reconcile loop and when the control plane stops; a new control plane (or a snapshot
rebuilt after a spec change or a failed write) starts from it. A kill (-9, or a signal that ends the process
before the control plane is stopped) loses at most the last ``EVERY``
seconds of history: the next control plane folds the time since the save in with the shares saved then.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from fairpod.governance import history
from fairpod.server.core.state import CoreState
from fairpod.store import StoreError

log = logging.getLogger("fairpod.fairshare")

KEY = "fairshare_history"
EVERY = 5.0  # seconds between saves


class HistoryKeeper:
    def __init__(self, every: float = EVERY) -> None:
        self.every = every
        self.last = -math.inf
        self.saves = 0

    def saved(self, cp: Any) -> dict[str, Any] | None:
        """The history to start a snapshot from: the live snapshot's, else the store's."""
        snap = getattr(cp, "snap", None)
        if snap is not None and snap.history_half_life is not None:
            return history.dump(snap)
        try:
            text = cp.store.get_meta(KEY)
            data = json.loads(text) if text else None
        except (StoreError, SQLAlchemyError, ValueError) as e:
            log.warning("fair-share history not read, starting empty: %s", e)
            return None
        return data if isinstance(data, dict) else None

    def tick(self, cp: CoreState, *, force: bool = False) -> None:
        if cp.snap.history_half_life is None:
            return
        now = cp.clock()
        if not force and now - self.last < self.every:
            return
        try:
            cp.store.set_meta(KEY, json.dumps(history.dump(cp.snap)))
        except (StoreError, SQLAlchemyError) as e:  # a full disk must not stop scheduling
            log.warning("could not save the fair-share history: %s", e)
            return
        self.last = now
        self.saves += 1
