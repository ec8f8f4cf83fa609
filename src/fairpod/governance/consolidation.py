"""Consolidation (engine rule 12, opt-in: ``policy.consolidation``): move running borrowed jobs to free whole nodes.

A multi-node job can wait while its type has enough free accelerators, spread over nodes that each also run a
job. Reclaim (rule 3) frees nodes only by taking capacity back from teams that use more than their quota; a
team's borrowed jobs on the right nodes may be left running because the team no longer borrows as a whole, or
the waiting job may itself borrow, where only fair share (which stops just-started jobs) could help. Moving
such a job costs only the work it did since its last checkpoint: it is stopped, requeued, and restarts on
another node, where it fits now. At the end of a cycle, after every team had its turn, for each job J that
failed in the cycle (its queue shape's first job), longest-waiting first:

- J has several replicas, each with accelerators; no topology level is required (no level in the cluster);
  J's team may hold it (within its quota with ``WithinQuota``; by borrowing too with ``AlsoBorrowing``), the
  pool has the capacity (``quota.pool_ok``), and J's user cap and its team's starving job do not hold it;
- **candidates to move**: running jobs that were admitted by borrowing (``Workload.borrowed_from``; work
  admitted within its team's quota is never moved), not elastic, not a service's minimum (``quota_bound``),
  past their ``min_runtime``, preempted fewer than ``MOVE_MAX_PREEMPTIONS`` times;
- **which**: per node of J's type that J may use, the cheapest candidates on it (least work lost first) that
  give it room for a replica of J (none where it has room already); the ``J.n`` cheapest nodes, their
  candidates together, are the moves;
- **only when it pays**: the moved jobs' lost work (accelerator-seconds since each one's last checkpoint) is
  less than J's gain, its accelerators x the seconds it has waited so far (the wait a job that has waited
  that long can expect still to come: it waits for fragmentation that nothing else clears);
- **a move, not a reclaim**: every moved job must fit elsewhere at once, beside J on its nodes (its team's
  quota or borrow limit, the lendable capacity, placement); else nothing moves.

Then J starts on the freed nodes and the moved jobs are preempted (kind ``move``, reason "moved to free whole
nodes for job J ..."), back in their queues at the end of the cycle, to restart in a later cycle.
"""

from __future__ import annotations

from typing import Protocol

from fairpod.governance import quota, users
from fairpod.governance.decisions import Decision
from fairpod.governance.nodes import Node
from fairpod.governance.placement import place
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload

# a job moved (or otherwise preempted) this often is not moved again
MOVE_MAX_PREEMPTIONS = 2
# the policy's values (``policy.consolidation``)
OFF, WITHIN_QUOTA, ALSO_BORROWING = "Off", "WithinQuota", "AlsoBorrowing"


class _Cycle(Protocol):
    """What this rule uses of a scheduling cycle (``scheduler._Cycle``)."""

    snap: Snapshot
    out: list[Decision]

    def team_may_start(self, w: Workload) -> bool: ...

    def team_check(self, w: Workload) -> tuple[bool, bool, str]: ...

    def reserved_for(self, w: Workload, within: bool) -> dict[str, str]: ...

    def never_fits(self, w: Workload) -> str | None: ...

    def admit(self, w: Workload, nodes: list[str], within: bool, victims: list[tuple[Workload, str]]) -> None: ...


def moved_reason(w: Workload) -> str:
    """The reason of a job moved for ``w``."""
    return (f"moved to free whole nodes for job {w.id} of team {w.team}: checkpointed and requeued, it restarts "
            "on another node")


def movable(v: Workload, now: float) -> bool:
    """May the running job ``v`` be moved? Only borrowed work, and not a job that moves keep hitting."""
    if not v.borrowed_from or v.max_n or v.quota_bound or v.preemptions >= MOVE_MAX_PREEMPTIONS:
        return False
    st = v.started
    return not (v.min_runtime and st is not None and now - st < v.min_runtime)


def lost(v: Workload, now: float) -> float:
    """The work ``v`` loses if moved now, in accelerator-seconds."""
    return v.lost_work(now) * v.total.acc


def gain(w: Workload, now: float) -> float:
    """What starting the waiting ``w`` now is worth, in accelerator-seconds: its accelerators x its wait so far."""
    return max(0.0, now - w.waiting_since()) * w.total.acc


def _node_cost(snap: Snapshot, nd: Node, w: Workload) -> tuple[float, list[Workload]] | None:
    """The cheapest running borrowed jobs on ``nd`` whose moving gives it room for a replica of ``w`` (least lost
    work first), with their lost work; None if moving every candidate would not."""
    a, c, m = w.req
    f = nd.free
    if f[0] >= a and f[1] >= c and f[2] >= m:
        return 0.0, []
    now = snap.now
    cands = sorted((lost(v, now), v.id, v) for v in (snap.running[j] for j in nd.jobs if j in snap.running)
                   if movable(v, now))
    fa, fc, fm = f
    cost = 0.0
    taken: list[Workload] = []
    for loses, _, v in cands:
        r = v.req
        fa, fc, fm = fa + r.acc, fc + r.mcpu, fm + r.mib
        cost += loses
        taken.append(v)
        if fa >= a and fc >= c and fm >= m:
            return cost, taken
    return None


def choose(snap: Snapshot, w: Workload, reserved: dict[str, str]) -> list[Workload] | None:
    """The jobs to move so that ``w.n`` nodes have room for ``w``, if that pays (lost work < ``gain``)."""
    a = w.req.acc
    options: list[tuple[float, str, list[Workload]]] = []
    for nd in snap.by_type.get(w.itype, ()):
        if not nd.schedulable or (w.passed_only and not nd.health_passed) or nd.cap[0] < a:
            continue
        if reserved and reserved.get(nd.name, w.id) != w.id:
            continue
        got = _node_cost(snap, nd, w)
        if got is not None:
            options.append((got[0], nd.name, got[1]))
    if len(options) < w.n:
        return None
    options.sort(key=lambda o: (o[0], o[1]))
    moved: dict[str, Workload] = {}
    for _, _, vs in options[:w.n]:
        for v in vs:
            moved[v.id] = v
    if not moved:
        return None  # room already (placement failed for another reason): nothing to move
    now = snap.now
    if not sum(lost(v, now) for v in moved.values()) < gain(w, now):
        return None
    return sorted(moved.values(), key=lambda v: v.id)


def _restart_elsewhere(cyc: _Cycle, w: Workload, moved: list[Workload]) -> bool:
    """With ``moved`` stopped and ``w`` placed, would each moved job start again now, one after the other (its
    team's check, the lendable capacity, placement; nodes held for ``w`` are free to it then)? ``snap`` is left as
    it was."""
    snap = cyc.snap
    placed: list[tuple[Workload, list[str]]] = []
    ok = True
    for v in sorted(moved, key=lambda v: (-v.total.acc, v.id)):  # the largest first
        old = list(v.nodes or ())
        good, within, _ = quota.team_check(snap, v)
        held = {n: h for n, h in cyc.reserved_for(v, within).items() if h != w.id}
        nodes = place(snap, v, held) if good and quota.pool_ok(snap, v) else None
        if nodes is None:
            ok = False
            break
        snap.assign(v, nodes)
        v.nodes = old
        placed.append((v, nodes))
    for v, nodes in reversed(placed):
        old = list(v.nodes or ())
        v.nodes = nodes
        snap.unassign(v)
        v.nodes = old
    return ok


def _try(cyc: _Cycle, w: Workload, mode: str) -> bool:
    snap = cyc.snap
    team = snap.teams[w.team]
    if w.n < 2 or w.req.acc <= 0 or w.max_n or w.topology_required or snap.levels:
        return False
    if snap.pool(w.itype).free[0] < w.total.acc:
        return False  # not fragmentation: too few free accelerators of its type in all (most cycles end here)
    if users.over_cap(team, w) or not cyc.team_may_start(w) or cyc.never_fits(w) is not None:
        return False
    ok, within, _ = cyc.team_check(w)
    if not ok or (not within and mode != ALSO_BORROWING) or not quota.pool_ok(snap, w):
        return False
    reserved = cyc.reserved_for(w, within)
    if place(snap, w, reserved) is not None:
        return False  # it fits now (it failed for another reason); not this rule's case
    moved = choose(snap, w, reserved)
    if moved is None:
        return False
    for v in moved:
        snap.unassign(v)
    nodes = place(snap, w, reserved)
    fine = False
    if nodes is not None:
        snap.assign(w, nodes)
        fine = _restart_elsewhere(cyc, w, moved)
        snap.unassign(w)
        w.nodes = None
    if not fine or nodes is None:
        for v in moved:
            snap.assign(v, v.nodes or [])
        return False
    cyc.admit(w, nodes, within, [(v, "move") for v in moved])
    return True


def consolidate(cyc: _Cycle, failed: dict[str, set], mode: str) -> None:
    """After a cycle's rounds: for each job that failed in it (first of its shape), longest-waiting first, move
    borrowed jobs to free whole nodes for it where that pays (module doc)."""
    snap = cyc.snap
    waiting: list[tuple[float, int, Workload]] = []
    for name, shapes in failed.items():
        team = snap.teams[name]
        for w in team.queue.heads():
            if w.shape in shapes and w.n >= 2:
                waiting.append((w.waiting_since(), w.seq, w))
    waiting.sort(key=lambda e: (e[0], e[1]))
    for _, _, w in waiting:
        if w.id in snap.pending and gain(w, snap.now) > 0.0:
            _try(cyc, w, mode)
