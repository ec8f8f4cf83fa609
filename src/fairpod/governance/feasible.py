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
- **the team's quota** (both): a quota-bound job (``Workload.quota_bound``, a service's minimum replicas) never
  borrows, so it can never run when its gang is more than its team's whole quota of its instance type
  (:func:`beyond_quota`). On a live cluster a spec that raises the quota lets it be submitted again.

The engine's own per-cycle checks (``placement.never_fits`` on the healthy nodes now, ``quota.ever_fits_quota``)
say why a queued job waits; they are the same rules applied to the cluster as it is at that cycle.
"""

from __future__ import annotations

from collections.abc import Set

from fairpod.governance import users
from fairpod.governance.placement import place, why_not
from fairpod.governance.quota import pool_ok, team_check
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload


def never_fits(snap: Snapshot, w: Workload, *, fixed: bool = False, declared: int = 0,
               quota_types: Set[str] = frozenset()) -> str | None:
    """Why ``w`` can never run on the cluster of ``snap``, or None if it could (see the module doc). ``fixed``:
    ``snap`` is the whole cluster, empty (the simulator); else a live one whose nodes may still join."""
    over = beyond_quota(snap, w)
    if over:
        return f"a service's minimum of {w.n} replicas {over} (its minimum replicas never borrow)"
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


def beyond_quota(snap: Snapshot, w: Workload) -> str | None:
    """Why the quota-bound ``w`` can never run within its team's whole quota of ``w.itype`` (it never borrows),
    or None: ``needs 5 nodes of ml.x; team T's quota is 4`` (in accelerators when a replica is not a whole node,
    in vCPUs or memory when those are what does not fit)."""
    team = snap.teams.get(w.team)
    if not w.quota_bound or team is None:
        return None
    q, t, r = team.q(w.itype), w.total, w.req
    nodes = snap.by_type.get(w.itype)
    cap = nodes[0].cap if nodes else None
    if t.acc > q.acc:
        if cap is not None and r == cap and q.acc % cap.acc == 0:
            return f"needs {w.n} nodes of {w.itype}; team {w.team}'s quota is {q.acc // cap.acc}"
        return (f"needs {t.acc} {w.itype} accelerators ({w.n} x {r.acc}); team {w.team}'s quota is {q.acc} "
                "accelerators")
    if t.mcpu > q.mcpu:
        return f"needs {t.mcpu / 1000:g} vCPUs of {w.itype}; team {w.team}'s quota is {q.mcpu / 1000:g}"
    if t.mib > q.mib:
        return f"needs {t.mib / 1024:g} GiB of {w.itype} memory; team {w.team}'s quota is {q.mib / 1024:g}"
    return None
