"""Can this job ever run on this cluster, however long it waits? The one home of that question.

Asked where a job enters: by the control plane at submit (a job that can never run is refused, ``NeverFits``)
and by the simulator when it loads a trace (such a job is reported "never runnable" and not replayed). Both ask
:func:`never_fits`; what they know of the cluster differs, and the rule says so instead of each keeping its own:

- **the nodes**: the job needs ``w.n`` nodes of its instance type. A live cluster counts every node of the type
  it has now, in any health (a faulty node recovers), or that may still join: ``declared`` nodes of the spec's
  instance groups (a Ray node starting), and a type that no node has yet is allowed when a team has quota for it
  (``quota_types``: its nodes come from the executor). A fixed cluster (the simulator's, ``fixed=True``) counts
  its nodes only, all healthy and idle, so the job must be *placed* there: its topology, its per-node request;
- **the team** (fixed clusters only): it must be able to hold the job, within its quota or by borrowing within
  its limit what the others could lend, and no per-user cap may bar it. On a live cluster quotas change by spec
  and the engine says why a job waits at every cycle (``placement.why_not``), so these are not reasons to refuse
  a submit.

The engine's own per-cycle checks (``placement.never_fits`` on the healthy nodes now, ``quota.ever_fits_quota``)
say why a queued job waits; they are the same rules applied to the cluster as it is at that cycle.
"""

from __future__ import annotations

from collections.abc import Set

from fairpod.governance import users
from fairpod.governance.placement import place, why_not
from fairpod.governance.quota import pool_ok, team_check
from fairpod.governance.snapshot import Snapshot, Workload


def never_fits(snap: Snapshot, w: Workload, *, fixed: bool = False, declared: int = 0,
               quota_types: Set[str] = frozenset()) -> str | None:
    """Why ``w`` can never run on the cluster of ``snap``, or None if it could (see the module doc). ``fixed``:
    ``snap`` is the whole cluster, empty (the simulator); else a live one whose nodes may still join."""
    if fixed:
        return _never_on_fixed(snap, w)
    nodes = snap.by_type.get(w.itype, [])
    if not nodes and w.itype not in quota_types:
        have = ", ".join(sorted(snap.by_type)) or "none"
        return f"the cluster has no {w.itype} nodes (it has: {have})"
    most = max(len(nodes), declared)  # nodes may still be joining: the spec's instance groups count as well
    if nodes and most < w.n:
        return f"the job asks for {w.n} {w.itype} nodes; the cluster has {most}"
    return None


def _never_on_fixed(snap: Snapshot, w: Workload) -> str | None:
    if place(snap, w) is None:
        return why_not(snap, w)
    ok, _, why = team_check(snap, w)
    if not ok:
        return why
    capped = users.never(snap.teams[w.team], w)
    if capped:
        return capped
    if not pool_ok(snap, w):
        return f"no idle {w.itype} capacity to borrow: the job needs more than its team's quota and what " \
               "the lending teams could ever lend"
    return None
