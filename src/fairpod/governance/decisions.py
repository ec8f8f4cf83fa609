"""What one scheduling cycle decides. Every decision carries a reason a user can read (engine rule 8)."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Admit:
    """Start ``job`` with one replica on each of ``nodes`` (in rank order), once ``after`` have stopped."""

    job: str
    nodes: tuple[str, ...]
    reason: str
    borrowed: int = 0  # accelerators this job borrows
    lenders: tuple[tuple[str, int], ...] = ()
    after: tuple[str, ...] = ()
    # a job with fallback instance types (``Workload.choices``): the one it starts on, with its request there; ""
    # and None for a job of one type
    itype: str = ""
    req: tuple[int, int, int] | None = None


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop ``job`` and put it back in its queue at its original place, to make room for ``by``."""

    job: str
    by: str
    kind: str  # "reclaim" | "priority" | "fair-share" | "move" (``consolidation``)
    reason: str


@dataclass(frozen=True, slots=True)
class Wait:
    """``job`` stays pending; ``reason`` changed since the last cycle."""

    job: str
    reason: str


@dataclass(frozen=True, slots=True)
class Grow:
    """Running elastic ``job`` gets replicas on ``added`` (new highest ranks): it runs on ``nodes`` now."""

    job: str
    nodes: tuple[str, ...]
    added: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Shrink:
    """Running elastic ``job`` gives up its replicas on ``removed`` (its highest ranks, never below its minimum)
    so that ``by`` fits; it keeps running on ``nodes``. ``kind`` as for Preempt, or "team" (a job of its own
    team queued behind it at the same priority)."""

    job: str
    nodes: tuple[str, ...]
    removed: tuple[str, ...]
    by: str
    kind: str
    reason: str


Decision = Admit | Preempt | Wait | Grow | Shrink


def displaced_reason(p: Preempt) -> str:
    """Why a job admitted and taken back within one cycle still waits (it never ran)."""
    return f"waiting: admitted and given up again in the same cycle to job {p.by} ({p.kind})"


def net_changes(decisions: list[Decision]) -> list[Decision]:
    """What one cycle changes, in decision order: the decisions a caller applies (simulator, control plane).

    Within one cycle the engine may admit a job and take it back later as a victim of another (admit J,
    preempt J, admit K). Such a job never ran: its Admit and Preempt are dropped, a Wait says why it still
    waits, and it is left out of the ``after`` of the job it made room for. Otherwise a job's first Preempt
    counts if it ran before the cycle (its first decision is that Preempt) and its last Admit if it runs
    after the cycle; Waits are kept.

    Grow and Shrink (elastic jobs) count only for a job that ran before the cycle and is not preempted in it;
    for a job admitted in the cycle they are folded into its Admit (which then names the final nodes).
    """
    first: dict[str, Admit | Preempt] = {}
    last: dict[str, Admit | Preempt] = {}
    final: dict[str, tuple[str, ...]] = {}  # nodes after a job's last Grow or Shrink that follows its last Admit
    for d in decisions:
        if isinstance(d, Admit | Preempt):
            first.setdefault(d.job, d)
            last[d.job] = d
            final.pop(d.job, None)
        elif isinstance(d, Grow | Shrink):
            final[d.job] = d.nodes
    never_ran = {j: p for j, p in last.items() if isinstance(p, Preempt) and isinstance(first[j], Admit)}
    out: list[Decision] = []
    for d in decisions:
        if isinstance(d, Admit):
            if last[d.job] is not d:
                continue
            if any(v in never_ran for v in d.after):
                d = replace(d, after=tuple(v for v in d.after if v not in never_ran))
            if d.job in final:
                d = replace(d, nodes=final[d.job])
        elif isinstance(d, Preempt) and (first[d.job] is not d or d.job in never_ran):
            continue
        elif isinstance(d, Grow | Shrink) and d.job in first:
            continue
        out.append(d)
    out.extend(Wait(j, displaced_reason(p)) for j, p in never_ran.items())
    return out
