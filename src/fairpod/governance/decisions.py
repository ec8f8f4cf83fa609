"""What one scheduling cycle decides. Every decision carries a reason a user can read (engine rule 8)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Admit:
    """Start ``job`` with one replica on each of ``nodes`` (in rank order), once ``after`` have stopped."""

    job: str
    nodes: tuple[str, ...]
    reason: str
    borrowed: int = 0  # accelerators this job borrows
    lenders: tuple[tuple[str, int], ...] = ()
    after: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop ``job`` and put it back in its queue at its original place, to make room for ``by``."""

    job: str
    by: str
    kind: str  # "reclaim" | "priority" | "fair-share"
    reason: str


@dataclass(frozen=True, slots=True)
class Wait:
    """``job`` stays pending; ``reason`` changed since the last cycle."""

    job: str
    reason: str


Decision = Admit | Preempt | Wait
