"""The lease's fence inside an executor (``fairpod up --ha``): the control plane checks its lease before each
executor action, but a pause of its process between that check and the act, longer than the lease, would let
the act through after a takeover. An executor that mixes in :class:`Fence` asks the fence again inside its own
lock, right before it starts processes or writes a stop (docs/ha.md, "Known window")."""

from __future__ import annotations

from collections.abc import Callable


class Fence:
    _fence: Callable[[str], None] | None = None

    def set_fence(self, fence: Callable[[str], None] | None) -> None:
        """``fence(what)`` raises ExecutorError to refuse (the lease's check); None: no fence."""
        self._fence = fence

    def _fenced(self, what: str) -> None:
        if self._fence is not None:
            self._fence(what)
