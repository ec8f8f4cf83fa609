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
already runs half of its quota, waits until J has been in the queue ``cost_wait`` seconds (rule 3b, ``_costly``; no
plan is made for J again before): room that frees by itself meanwhile costs nothing. Jobs inside their
``min_runtime`` are never candidates. Candidates are taken in the order of ``ordering.victim_key`` (``sort_victims``)
until J fits; then every victim that is not needed is given back (no more than needed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from fairpod.governance import budget, fairshare, groups, quota, topology, users, within_team
from fairpod.governance.ordering import sort_victims
from fairpod.governance.placement import place
from fairpod.governance.snapshot import Node, Snapshot, Workload

# A job preempted this often is no longer taken for fair share (a lender's reclaim still takes it).
FAIR_SHARE_MAX_PREEMPTIONS = 2
# Fair share stops a job only if the work it loses (accelerator-seconds) is at most this fraction of what the
# preemptor has waited (seconds x its accelerators): only jobs that have just started (or just checkpointed) are
# taken. Fair share evens out waiting among borrowers, it must not destroy work to do so (a victim without
# checkpoints loses its whole run, and that lost work is what the cluster pays). This also keeps a requeued job,
# which has lost the least work, from being picked again and again.
FAIR_SHARE_WORK_RATIO = 100


def _since(v: Workload) -> float:
    """Since when a running job's work would be lost: its last checkpoint, or its start."""
    s = v.started or 0.0
    return s if v.checkpoint is None or v.checkpoint < s else v.checkpoint


def _recent_first(snap: Snapshot, itype: str, team: str, running: dict[str, Workload]) -> list[Workload]:
    """A team's running jobs on ``itype``: those without accelerators first, then the one that would lose least
    work first; sorted again only when the team's usage, a job's reported checkpoint or a start time changed
    (a forecast on a copy may set the start of a job that had none)."""
    key = ("recent", itype, team, snap.teams[team].version)
    got = snap.memo.get(key)
    if got is not None:
        order, ckpts, starts, cycle = got  # type: ignore[misc]
        if cycle == snap.cycle:
            return order  # type: ignore[no-any-return]  # checkpoints and starts change only between cycles
        if [v.checkpoint for v in order] == ckpts and [v.started for v in order] == starts:
            got[3] = snap.cycle  # type: ignore[index]
            return order  # type: ignore[no-any-return]
    order = sorted(running.values(), key=lambda v: (v.total.acc > 0, -_since(v)))
    snap.memo[key] = [order, [v.checkpoint for v in order], [v.started for v in order],  # type: ignore[assignment]
                      snap.cycle]
    return order


def _fair_gates(snap: Snapshot, itype: str, team: str, running: dict[str, Workload]
                ) -> tuple[list[Workload], list[tuple[float, float, bool]]]:
    """A team's running jobs in ``_recent_first`` order, and for the first of them (``_gate`` extends the list
    as far as a plan reads) what ``plan``'s fair-share test compares with the preemptor's waited
    accelerator-seconds; kept once per team, usage and cycle (``now`` is fixed within one)."""
    cycle: dict | None = snap.memo.get(("gates", snap.cycle))  # one entry per cycle
    if cycle is None:
        cycle = snap.memo[("gates", snap.cycle)] = {}  # type: ignore[assignment]
    key = (itype, team, snap.teams[team].version)
    got = cycle.get(key)
    if got is None:
        got = cycle[key] = (_recent_first(snap, itype, team, running), [])
    return got  # type: ignore[no-any-return]


def _gate(v: Workload, now: float) -> tuple[float, float, bool]:
    """For the fair-share test of ``v``: the work it would lose (``inf``: preempted too often to be taken), the
    bound past which it and every job after it lose too much (``-inf``: never), and whether its ``min_runtime``
    is over."""
    st = v.started
    tacc = v.total[0]
    loses = math.inf if v.preemptions >= FAIR_SHARE_MAX_PREEMPTIONS else v.lost_work(now) * tacc * FAIR_SHARE_WORK_RATIO
    stop = (now - _since(v)) * FAIR_SHARE_WORK_RATIO if tacc > 0 else -math.inf
    return loses, stop, not (v.min_runtime and st is not None and now - st < v.min_runtime)


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


def _could_fit(snap: Snapshot, w: Workload, cands: list[Workload], reserved: dict[str, str], level: int) -> bool:
    """For a job with a required topology level (``level``, its index; -1: the cluster lacks it): would one domain
    of that level have ``w.n`` nodes with room for a replica if every candidate were stopped? (A bound before trying
    victims; without a required level ``_reaches`` is the tighter bound of the same count.)"""
    if level < 0:
        return False
    freed: dict[str, list[int]] = {}
    for v in cands:
        r = v.req
        for name in v.nodes or ():
            f = freed.setdefault(name, [0, 0, 0])
            f[0] += r.acc
            f[1] += r.mcpu
            f[2] += r.mib
    a, c, m = w.req
    fit: list[Node] = []
    for nd in snap.by_type.get(w.itype, ()):
        if not nd.schedulable or (w.passed_only and not nd.health_passed):
            continue
        if reserved and reserved.get(nd.name, w.id) != w.id:
            continue
        g: Sequence[int] = freed.get(nd.name, (0, 0, 0))
        if nd.free[0] + g[0] >= a and nd.free[1] + g[1] >= c and nd.free[2] + g[2] >= m:
            fit.append(nd)
    return topology.largest(fit, level)[1] >= w.n


def _acc_could_fit(snap: Snapshot, w: Workload, cands: list[Workload]) -> bool:
    """A loose bound on accelerators alone (most plans fail on it): would ``w.n`` nodes have ``w.req.acc`` free
    accelerators if every candidate were stopped (health, holds and the other resources not checked)? False
    means no choice of victims among ``cands`` makes ``w`` fit."""
    a = w.req.acc
    nodes = snap.nodes
    freed: dict[str, int] = {}
    for v in cands:
        ra = v.req.acc
        for name in v.nodes or ():
            freed[name] = freed.get(name, 0) + ra
    count = 0
    for name, x in freed.items():
        nd = nodes.get(name)
        if nd is not None and nd.free[0] + x >= a:
            count += 1
    if count >= w.n:
        return True
    for names in snap.with_free(w.itype, a):
        for name in names:
            if name not in freed:
                count += 1
                if count >= w.n:
                    return True
    return False


def _reaches(snap: Snapshot, w: Workload, cands: list[Workload], within: bool, fitting: set[str],
             reserved: dict[str, str]) -> bool:
    """A dry run of ``plan``'s victim loop on the side (usage and freed capacity tracked here, ``snap`` not
    touched): taking the candidates in order and skipping those the loop skips, would enough nodes ever have
    room for a replica of ``w``? If not, the loop would stop no victim for good, so the plan fails at once."""
    it = w.itype
    team = snap.teams[w.team]
    wt = w.total
    a, c, m = w.req
    gone: dict[str, tuple[int, int, int]] = {}  # usage taken from each team so far
    freed: dict[str, list[int]] = {}
    room = set(fitting)
    mine, mine_at = 0.0, None  # our share after admission, for the own jobs taken so far
    lend = snap.lendable(it)
    qu: dict[str, tuple] = {}  # per team: (team, quota, usage) of ``it``
    theirs_at: dict[tuple, float] = {}  # a team's share after losing its jobs taken so far and one more
    for v in cands:
        vt = v.total
        g = gone.get(v.team, (0, 0, 0))
        if v.team != w.team:
            got = qu.get(v.team)
            if got is None:
                t = snap.teams[v.team]
                got = qu[v.team] = (t, t.q(it), t.u(it))
            t, q, u = got
            if u[0] - g[0] <= q[0] and u[1] - g[1] <= q[1] and u[2] - g[2] <= q[2]:
                continue  # that team gave back all it borrowed already
            if not within and not snap.groups:  # (with groups the loop tests level by level; this bound does not)
                own = gone.get(w.team, (0, 0, 0))
                if own != mine_at:
                    mine, mine_at = fairshare.share(snap, team, it, (wt[0] - own[0], wt[1] - own[1], wt[2] - own[2]),
                                                    lend=lend), own
                key = (v.team, g, vt)
                theirs = theirs_at.get(key)
                if theirs is None:
                    theirs = theirs_at[key] = fairshare.share(
                        snap, t, it, (-g[0] - vt[0], -g[1] - vt[1], -g[2] - vt[2]), lend=lend)
                if not fairshare.may_preempt(mine, theirs):
                    continue
        gone[v.team] = (g[0] + vt[0], g[1] + vt[1], g[2] + vt[2])
        r = v.req
        for name in v.nodes or ():
            if name in room:
                continue
            f = freed.setdefault(name, [0, 0, 0])
            f[0] += r.acc
            f[1] += r.mcpu
            f[2] += r.mib
            nd = snap.nodes.get(name)
            if (nd is not None and nd.schedulable and (nd.health_passed or not w.passed_only)
                    and (not reserved or reserved.get(name, w.id) == w.id)
                    and nd.free[0] + f[0] >= a and nd.free[1] + f[1] >= c and nd.free[2] + f[2] >= m):
                room.add(name)
        if len(room) >= w.n:
            return True
    return False


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
            order, gates = _fair_gates(snap, w.itype, name, running)
            for i, v in enumerate(order):
                if i == len(gates):
                    gates.append(_gate(v, now))
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
    if not cands or (w.req.acc > 0 and not _acc_could_fit(snap, w, cands)):
        return None  # most plans end here: too few nodes would have the accelerators even with every candidate gone
    lv = topology.level_of(snap, w)
    if lv is not None and lv[1] and not _could_fit(snap, w, cands, reserved, lv[0]):
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
    if not _reaches(snap, w, cands, within or by_rule, fitting, reserved):
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
    if within and snap.cost_wait and _costly(snap, w, removed):
        for v, _ in reversed(removed):
            snap.assign(v, v.nodes or [])
        return None
    final = fits_now(snap, w, reserved, holder, within_after)
    assert final is not None
    return removed, final


# Rule 3b holds a reclaim back only for a team that already runs at least this share of its quota of the type: a
# team that lends most of its quota gets it back at once. On the three contended ITP replays (docs/simulator.md)
# without it the lender cluster10 waited 36-107 s on average (rho up to 1.002) and cluster01 of the third spec
# reached rho 1.024; with 1/2 cluster10 waits 16-49 s (rho <= 1.0007) and no team's rho passes 1.001; 3/4 kept
# cluster10 at rho 1.000 but gave up 0.5-0.7 points of utilization on two specs.
COSTLY_FROM_USAGE = 0.5


def _costly(snap: Snapshot, w: Workload, removed: list[tuple[Workload, str]]) -> bool:
    """Rule 3b: is this reclaim held back? Its victims of other teams would lose at least 2 x ``cost_wait``
    seconds of work per accelerator of ``w`` (a wait of ``cost_wait`` costs ``w`` less than half of it), ``w`` has
    waited less than ``cost_wait``, and its team already runs ``COSTLY_FROM_USAGE`` of its quota. Then ``w`` waits
    for room to free by itself (``snap.cost_held``)."""
    acc = w.total[0]
    if acc <= 0 or snap.now - w.waiting_since() >= snap.cost_wait:
        return False
    team = snap.teams[w.team]
    if team.u(w.itype)[0] < COSTLY_FROM_USAGE * team.q(w.itype)[0]:
        return False  # it lends most of its quota: it gets it back at once
    destroyed = 0.0
    for v, kind in removed:
        if kind == "reclaim":
            destroyed += v.lost_work(snap.now) * v.total[0]
    if destroyed < 2.0 * snap.cost_wait * acc:
        return False
    until = w.waiting_since() + snap.cost_wait
    snap.cost_held[w.id] = (until, destroyed)
    snap.retry_at = min(snap.retry_at, until)
    return True


def held_reason(snap: Snapshot, w: Workload) -> str:
    """Why a job whose reclaim is held back (``_costly``) waits."""
    return (f"waiting for reclaim: the borrowed jobs it would stop would lose "
            f"{snap.cost_held[w.id][1] / 3600:.1f} accelerator-hours of work, so it waits up to "
            f"{snap.cost_wait / 60:.0f} min in the queue for room to free by itself before they are stopped "
            "(policy preemption_cost_wait_seconds)")
