"""Preemption planning (engine rules 3, 3b, 4, 5 and 7): which running jobs to stop so that a pending job fits.

Candidates, by the situation of the pending job J of team T on instance type I:
- reclaim: J fits within T's quota, so T is entitled to it; jobs of other teams that are borrowing on I;
- fair share: J must borrow and the policy is FairShare; jobs of other borrowing teams, each only if T's
  share after admitting J stays at or below that team's share after losing the candidate, the candidate was
  preempted fewer than twice, and it loses at most 1/``FAIR_SHARE_WORK_RATIO`` of the accelerator-seconds J has
  waited;
- priority: T preempts its own lower-priority jobs (TaskRanking, team's preempt_team_tasks LowerPriority);
  with a per-user cap (rule 9) J fits only once its user is within the cap, so a job over its user's cap
  starts only in place of enough of that user's own lower-priority jobs.
- reclaim and priority together (``quota.reclaims_with_own``, opt-in: ``policy.reclaim_with_own_jobs``): J does not fit T's quota beside T's jobs, but would once
  T's lower-priority jobs stop, and other teams borrow I: the scheduler asks for a plan with both kinds of
  candidates (``within_after``), taken in the victim order (borrowed work first) until J fits *within* T's quota,
  so a team below its quota takes back what it lent and stops its own lower-priority jobs together.
- J must borrow, opt-in: other borrowing teams' jobs that ``cross_ok`` allows (as ``cross_kind``), with T's own
  lower-priority jobs: by priority (rule 5c, ``borrow_priority``), within groups (3c, ``hierarchical_reclaim``).
A reclaim whose victims would lose at least 2 x ``cost_wait`` seconds of work per accelerator of J, for a team that
already runs half of its quota, waits until J has been in the queue ``cost_wait`` seconds (rule 3b,
``costly_reclaim``; no plan is made for J again before): room that frees by itself meanwhile costs nothing. Jobs
inside their ``min_runtime`` are never candidates. Candidates are taken in the order of ``ordering.victim_key`` (``sort_victims``)
until J fits; then every victim that is not needed is given back (no more than needed).

The parts of a plan in modules of their own: which jobs fair share may stop (``fair_victims``), the bounds checked
before any job is stopped (``victim_bounds``), and rule 3b's wait (``costly_reclaim``).
"""

from __future__ import annotations

from collections.abc import Callable

from fairpod.governance import budget, fairshare, groups, quota, topology, users, within_team
from fairpod.governance.costly_reclaim import costly
from fairpod.governance.fair_victims import fair_gates, gate
from fairpod.governance.ordering import sort_victims
from fairpod.governance.placement import place
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.victim_bounds import acc_could_fit, could_fit, reaches
from fairpod.governance.workload import Workload


def _checkpoint_soon(v: Workload, now: float, until: float) -> bool:
    """Is ``v``'s next checkpoint due after now and by ``until`` (the preemptor's wait in the queue plus the
    policy's checkpoint wait)? Then it is not taken before it (KAI's preemption delay): stopped just after its
    checkpoint it loses almost nothing, and the preemptor waits at most that long for it."""
    due = v.checkpoint_due
    return due is not None and now < due <= until


def _borrowers(snap: Snapshot, itype: str) -> list[tuple[str, float]]:
    """The teams that borrow ``itype`` now, in name order, with their share (``fairshare.share``, no history);
    computed once per cycle and usage (plans of one cycle read the same)."""
    key = ("borrowers", itype, snap.version, snap.cycle)
    got = snap.memo.get(key)
    if got is None:
        got = snap.memo[key] = [  # type: ignore[assignment]
            (name, fairshare.share(snap, snap.teams[name], itype)) for name in sorted(snap.teams)
            if borrowing(snap, name, itype)]
    return got  # type: ignore[return-value]


def borrowing(snap: Snapshot, team_name: str, itype: str) -> bool:
    """Does the team use more than its quota of ``itype`` (in any dimension)?"""
    t = snap.teams[team_name]
    q = t.q(itype)
    u = t.u(itype)
    return u[0] > q[0] or u[1] > q[1] or u[2] > q[2]


def fits_now(snap: Snapshot, w: Workload, reserved: dict[str, str], holder: str | None,
             within_only: bool = False) -> list[str] | None:
    """The nodes for ``w`` as the cluster is now (team quota, pool, per-user cap, placement), or None; with
    ``within_only``, only if ``w`` runs within its team's quota."""
    ok, within, _ = quota.team_check(snap, w)
    if not ok or (within_only and not within) or not quota.pool_ok(snap, w, holder) \
            or users.over_cap(snap.teams[w.team], w):
        return None
    return place(snap, w, reserved)


def plan(
    snap: Snapshot,
    w: Workload,
    within: bool,
    reserved: dict[str, str],
    holder: str | None = None,
    cross_team: bool = True,
    within_after: bool = False,
    cross_ok: Callable[[Workload], bool] | None = None,
    cross_kind: str = "",
) -> tuple[list[tuple[Workload, str]], list[str]] | None:
    """Victims (with their kind) and the nodes for ``w``, or None if no allowed preemption makes it fit.

    ``within_after`` (with ``within``; ``quota.reclaims_with_own``): ``w`` does not fit its team's quota now, but
    borrowed work of other teams and the team's own lower-priority jobs are candidates together, and the plan
    holds only once ``w`` fits within the quota.

    On success the victims are left unassigned in ``snap`` (the caller requeues them); on failure ``snap``
    is as before.
    """
    now = snap.now
    waited_since = w.waiting_since()
    if snap.preempt_min_wait and now - waited_since < snap.preempt_min_wait:
        return None  # it has not waited long enough to stop another job
    team = snap.teams[w.team]
    pool = snap.pool(w.itype)
    others_borrow = pool.over[0] > 0 or pool.over[1] > 0 or pool.over[2] > 0
    own = team.preempt_lower and snap.task_ranking
    by_rule = cross_ok is not None
    cross = cross_team and others_borrow and (within or snap.fair_share or by_rule)
    if not own and not cross:
        return None
    if cross:
        others = [b for b in _borrowers(snap, w.itype) if b[0] != w.team]
        if not within and not by_rule:
            # fair share: a victim's team must keep a share >= ours after admission; removing a job only lowers
            # a share, so teams whose share is already below ours can give no victim
            mine = fairshare.share(snap, team, w.itype, w.total)
            borrowers = [name for name, share in others if share >= mine or snap.groups]
        else:
            borrowers = [name for name, _ in others]
    else:
        borrowers = []
    if not own and not borrowers:
        return None
    # nodes that could take no replica of ``w`` even once emptied: a victim only there frees nothing useful
    blocked = {name for name, holder in reserved.items() if holder != w.id} if reserved else set()
    blocked |= snap.unschedulable
    if w.passed_only:
        blocked.update(nd.name for nd in snap.by_type.get(w.itype, ()) if not nd.health_passed)
    cands: list[Workload] = []
    teams = ([w.team] if own else []) + borrowers  # borrowers are in name order
    waited_acc = (now - w.waiting_since()) * w.total.acc
    for name in teams:
        fair = name != w.team and not within and not by_rule  # a fair-share candidate: the cheapest test first
        mine_only = name == w.team  # own jobs: only those of lower priority
        running = snap.running_by.get((w.itype, name), {})
        if fair:
            order, gates = fair_gates(snap, w.itype, name, running)
            for i, v in enumerate(order):
                if i == len(gates):
                    gates.append(gate(v, now))
                loses, stop, done = gates[i]
                if not loses <= waited_acc:  # preempted too often, or it would lose too much work
                    if stop > waited_acc:
                        break  # it would lose too much, and so would every job after it
                    continue
                if not done:
                    continue
                if blocked and all(n in blocked for n in v.nodes or ()):
                    continue  # stopping it frees nothing ``w`` may use
                if snap.checkpoint_wait and _checkpoint_soon(v, now, waited_since + snap.checkpoint_wait):
                    continue
                cands.append(v)
            continue
        for v in running.values():
            st = v.started
            if not within_team.outranks(snap, team, w, v) if mine_only else cross_ok is not None and not cross_ok(v):
                continue
            if v.min_runtime and st is not None and now - st < v.min_runtime:
                continue
            if blocked and all(n in blocked for n in v.nodes or ()):
                continue  # stopping it frees nothing ``w`` may use
            if snap.checkpoint_wait and _checkpoint_soon(v, now, waited_since + snap.checkpoint_wait):
                continue
            cands.append(v)
    if not cands or (w.req.acc > 0 and not acc_could_fit(snap, w, cands)):
        return None  # most plans end here: too few nodes would have the accelerators even with every candidate gone
    lv = topology.level_of(snap, w)
    if lv is not None and lv[1] and not could_fit(snap, w, cands, reserved, lv[0]):
        return None  # no domain of its required level would have enough nodes
    shares: dict[str, float] = {}

    def team_share(name: str) -> float:
        if within or by_rule or not snap.fair_share:
            return 0.0
        if name not in shares:
            shares[name] = fairshare.share(snap, snap.teams[name], w.itype, with_history=True)
        return shares[name]

    lowest = {name: budget.LOWEST if budget.demoted(snap.teams[name], w.itype) else None for name in teams}
    sort_victims(cands, w.team, now, team_share, lowest.__getitem__)  # the order of ``victim_key``
    removed: list[tuple[Workload, str]] = []
    nodes: list[str] | None = None
    a, c, m = w.req

    def fits(name: str) -> bool:
        nd = snap.nodes.get(name)
        return (nd is not None and nd.schedulable and (nd.health_passed or not w.passed_only)
                and (not reserved or reserved.get(name, w.id) == w.id)
                and nd.free[0] >= a and nd.free[1] >= c and nd.free[2] >= m)

    fitting = ({name for names in snap.with_free(w.itype, a) for name in names if fits(name)} if a > 0
               else {nd.name for nd in snap.by_type.get(w.itype, ()) if fits(nd.name)})
    if not reaches(snap, w, cands, within or by_rule, fitting, reserved):
        return None  # the loop below would never have enough nodes to ask placement
    for v in cands:
        if v.team == w.team:
            kind = "priority"
        else:
            if not borrowing(snap, v.team, w.itype) or (cross_ok is not None and not cross_ok(v)):
                continue  # that team gave back all it borrowed already (or the rule no longer allows it)
            if within or by_rule:
                kind = cross_kind if by_rule else "reclaim"
            else:
                vt = v.total
                if snap.groups:  # where the two teams' paths part in the tree (rule 2b)
                    wt = w.total
                    mine, theirs = groups.pair_shares(snap, team, snap.teams[v.team], w.itype, (wt[0], wt[1], wt[2]),
                                                      (vt[0], vt[1], vt[2]))
                else:
                    mine = fairshare.share(snap, team, w.itype, w.total)  # own victims may have lowered it
                    theirs = fairshare.share(snap, snap.teams[v.team], w.itype, (-vt[0], -vt[1], -vt[2]))
                if not fairshare.may_preempt(mine, theirs):
                    continue
                kind = "fair-share"
        snap.unassign(v)
        removed.append((v, kind))
        fitting.update(name for name in v.nodes or () if fits(name))
        if len(fitting) < w.n:
            continue  # not enough nodes yet: no need to ask placement
        nodes = fits_now(snap, w, reserved, holder, within_after)
        if nodes is not None:
            break
    if nodes is None:
        for v, _ in reversed(removed):
            snap.assign(v, v.nodes or [])
        return None
    # give back every victim that is not needed, most valuable first
    for i in range(len(removed) - 2, -1, -1):
        v, _ = removed[i]
        snap.assign(v, v.nodes or [])
        again = fits_now(snap, w, reserved, holder, within_after)
        if again is None:
            snap.unassign(v)
        else:
            nodes = again
            removed.pop(i)
    if within and snap.cost_wait and costly(snap, w, removed):
        for v, _ in reversed(removed):
            snap.assign(v, v.nodes or [])
        return None
    final = fits_now(snap, w, reserved, holder, within_after)
    assert final is not None
    return removed, final
