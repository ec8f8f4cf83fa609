"""Elastic jobs (engine rule 11): a gang of N..M replicas of one shape that grows and shrinks while it runs.

A job with ``min_n`` N and ``max_n`` M (``Workload``) waits, is ordered and is checked like a job of N
replicas (its queue shape is that of N). Then:

- **admission**: it starts with N replicas placed as any gang (all or none) and, in the same step, takes more
  replicas one at a time while they fit within its team's quota: the largest k in [N, M] that fits now
  without borrowing. Replicas that would borrow wait for the growth step below, so that idle capacity is lent
  only after every team took what it is entitled to (rule 2);
- **growth**: at the end of a cycle, after every pending job had its turn (what is still pending could not
  start on the capacity that is idle now), running elastic jobs below M grow into idle capacity one replica
  per job per round, in queue order, within quota, borrow limit and lendable capacity, never onto nodes held
  for a starving job. A job that shrank grows again only ``Snapshot.elastic_holdoff`` seconds later, so
  that shrink and growth never alternate in consecutive cycles;
- **shrink before preemption**: when a pending job J does not fit, replicas above N of running elastic jobs
  are taken first, one at a time from the highest rank, in the victim order of ``ordering.victim_key``:
  jobs of teams that borrow (J within quota: reclaim; J borrowing under FairShare: fair share, while the
  shares allow it) and jobs of J's own team of lower or equal priority (grown replicas are borrowed from
  the team's queue). Once J fits, replicas that are not needed are given back. Only if no shrink makes J
  fit does ``preemption.plan`` stop jobs whole. A shrink does not count as a preemption (the job keeps
  running) and is allowed inside a job's ``min_runtime``.

Replica ranks are the order of ``Workload.nodes``: growth appends, a shrink removes from the end.
"""

from __future__ import annotations

from typing import Protocol

from fairpod.governance import budget, fairshare, quota, topology, users
from fairpod.governance.decisions import Decision, Grow, Shrink
from fairpod.governance.ordering import victim_key
from fairpod.governance.preemption import borrowing
from fairpod.governance.preemption import fits_now as _fits_now
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload


class _Cycle(Protocol):
    """What these rules use of a scheduling cycle (``scheduler._Cycle``)."""

    snap: Snapshot
    out: list[Decision]
    reserved: dict[str, str]
    held_for_borrower: dict[str, str]

    def team_may_start(self, w: Workload) -> bool: ...

    def admit(self, w: Workload, nodes: list[str], within: bool, victims: list[tuple[Workload, str]]) -> None: ...


def resize(snap: Snapshot, w: Workload, nodes: list[str]) -> None:
    """Run the elastic job ``w`` on ``nodes`` (rank order) from now on, its usage counted anew."""
    snap.unassign(w)
    w.set_n(len(nodes))
    snap.assign(w, nodes)


def _one(w: Workload) -> Workload:
    """One more replica of ``w``, as a job of its own for the quota, borrow and per-user checks."""
    return Workload(w.id, w.team, w.itype, 1, w.req, priority=w.priority, submit=w.submit, seq=w.seq,
                    passed_only=w.passed_only, user=w.user)


def _pick_node(snap: Snapshot, w: Workload, held: dict[str, str]) -> str | None:
    """The node for one more replica of ``w``: one it does not run on yet, in best-fit order; with a topology
    level, in a domain of it that ``w`` already uses (required: only there; otherwise there first)."""
    a, c, m = w.req
    mine = set(w.nodes or ())
    cands = [nd for nd in snap.by_type.get(w.itype, ())
             if nd.name not in mine and nd.schedulable and (nd.health_passed or not w.passed_only)
             and nd.free[0] >= a and nd.free[1] >= c and nd.free[2] >= m
             and held.get(nd.name, w.id) == w.id]
    if not cands:
        return None
    lv = topology.level_of(snap, w)
    if lv is None or lv[0] < 0:
        return min(cands, key=topology.node_key).name
    used = {snap.nodes[n].topo[lv[0]] for n in mine if n in snap.nodes}
    if lv[1]:
        cands = [nd for nd in cands if nd.topo[lv[0]] in used]
        return min(cands, key=topology.node_key).name if cands else None
    return min(cands, key=lambda nd: (nd.topo[lv[0]] not in used, topology.node_key(nd))).name


def _may_add(cyc: _Cycle, w: Workload, borrow: bool) -> bool:
    snap = cyc.snap
    one = _one(w)
    if users.over_cap(snap.teams[w.team], one):
        return False
    ok, within, _ = quota.team_check(snap, one)
    return ok and (within or borrow) and cyc.team_may_start(one) and quota.pool_ok(snap, one)


def add_replicas(cyc: _Cycle, w: Workload, *, borrow: bool, limit: int | None = None) -> list[str]:
    """Grow the running elastic job ``w`` by up to ``limit`` replicas (default: up to its maximum) while they fit;
    without ``borrow`` only within its team's quota. Returns the nodes added."""
    snap = cyc.snap
    held = {**cyc.held_for_borrower, **cyc.reserved}
    added: list[str] = []
    while w.n < w.max_n and (limit is None or len(added) < limit) and _may_add(cyc, w, borrow):
        name = _pick_node(snap, w, held)
        if name is None:
            break
        resize(snap, w, [*(w.nodes or ()), name])
        added.append(name)
    return added


def grow(cyc: _Cycle) -> None:
    """The growth step at the end of a cycle (see the module doc)."""
    snap = cyc.snap
    if not snap.elastic:
        return
    jobs = sorted((w for w in snap.elastic.values() if w.n < w.max_n
                   and (w.resized is None or snap.now - w.resized >= snap.elastic_holdoff)),
                  key=lambda w: (snap.queue_key(w), w.id))
    added: dict[str, list[str]] = {}
    while jobs:
        nxt = []
        for w in jobs:
            got = add_replicas(cyc, w, borrow=True, limit=1)
            if got:
                added.setdefault(w.id, []).extend(got)
                if w.n < w.max_n:
                    nxt.append(w)
        jobs = nxt
    for wid, nodes in added.items():
        w = snap.running[wid]
        over = max(0, snap.teams[w.team].u(w.itype)[0] - snap.teams[w.team].q(w.itype)[0])
        how = f", borrowing {over} accelerators" if over else f" within team {w.team}'s quota"
        cyc.out.append(Grow(w.id, tuple(w.nodes or ()), tuple(nodes),
                            f"grown to {w.n} of at most {w.max_n} replicas into idle capacity{how}"))


def _kind(snap: Snapshot, v: Workload, w: Workload, within: bool) -> str | None:
    """Why a replica of ``v`` may go so that ``w`` fits, or None if it may not (now)."""
    if v.team == w.team:
        return "priority" if v.priority < w.priority else "team"
    if not borrowing(snap, v.team, w.itype):
        return None  # that team gave back all it borrowed already
    if within:
        return "reclaim"
    mine = fairshare.share(snap, snap.teams[w.team], w.itype, w.total)
    r = v.req
    theirs = fairshare.share(snap, snap.teams[v.team], w.itype, (-r.acc, -r.mcpu, -r.mib))
    return "fair-share" if fairshare.may_preempt(mine, theirs) else None


_WHY = {
    "reclaim": "team {team} reclaims its quota for job {job}",
    "priority": "for higher-priority job {job} of team {team}",
    "fair-share": "for fair share: team {team} (job {job}) has the lower share of idle capacity",
    "team": "for job {job} of its team, queued at the same priority (grown replicas yield first)",
}


def shrink_to_fit(cyc: _Cycle, w: Workload, within: bool, reserved: dict[str, str], holder: str | None,
                  cross_team: bool) -> bool:
    """Admit ``w`` by shrinking running elastic jobs (never below their minimum), if that makes it fit.
    On success the Shrink decisions and the Admit are recorded; on failure ``cyc.snap`` is as before."""
    snap = cyc.snap
    if not snap.elastic:
        return False
    cross = cross_team and (within or snap.fair_share)
    cands = [v for v in snap.elastic.values()
             if v.itype == w.itype and v.n > v.min_n and v.id != w.id
             and ((v.team == w.team and v.priority <= w.priority)
                  or (v.team != w.team and cross and borrowing(snap, v.team, w.itype)))]
    if not cands:
        return False
    if not within and snap.fair_share:
        shares: dict[str, float] = {}

        def team_share(name: str) -> float:
            if name not in shares:
                shares[name] = fairshare.share(snap, snap.teams[name], w.itype, with_history=True)
            return shares[name]
    else:
        def team_share(name: str) -> float:
            return 0.0
    cands.sort(key=victim_key(w.team, snap.now, team_share, lambda v: budget.priority(snap.teams[v.team], v)))
    removed: list[tuple[Workload, str, str]] = []  # (job, node of its replica, kind), in the order taken
    nodes: list[str] | None = None
    if w.quota_bound and not within:
        team = snap.teams[w.team]

        def fits_now(snap: Snapshot, w: Workload, reserved: dict[str, str], holder: str | None) -> list[str] | None:
            # a quota-bound job fits only once its own team's shrunk replicas leave room within its quota
            return _fits_now(snap, w, reserved, holder) if quota.within_quota(team, w.itype, w.total) else None
    else:
        fits_now = _fits_now
    for v in cands:
        while nodes is None and v.n > v.min_n:
            kind = _kind(snap, v, w, within)
            if kind is None:
                break
            assert v.nodes
            removed.append((v, v.nodes[-1], kind))
            resize(snap, v, v.nodes[:-1])
            nodes = fits_now(snap, w, reserved, holder)
        if nodes is not None:
            break
    if nodes is None:
        for v, node, _ in reversed(removed):
            resize(snap, v, [*(v.nodes or ()), node])
        return False
    # give back the replicas that are not needed, the last taken first (a job's replicas only from its
    # highest rank down, so that the ranks it keeps stay 0..k-1)
    for i in range(len(removed) - 2, -1, -1):
        v, node, _ = removed[i]
        if any(u is v for u, _, _ in removed[i + 1:]):
            continue
        resize(snap, v, [*(v.nodes or ()), node])
        again = fits_now(snap, w, reserved, holder)
        if again is None:
            resize(snap, v, (v.nodes or [])[:-1])
        else:
            nodes = again
            removed.pop(i)
    final = fits_now(snap, w, reserved, holder)
    assert final is not None
    gone: dict[str, tuple[Workload, list[str], str]] = {}
    for v, node, kind in removed:
        gone.setdefault(v.id, (v, [], kind))[1].append(node)
    for v, out, kind in gone.values():
        v.resized = snap.now
        why = f"shrunk to {v.n} of {v.max_n} replicas: " + _WHY[kind].format(team=w.team, job=w.id)
        cyc.out.append(Shrink(v.id, tuple(v.nodes or ()), tuple(out), w.id, kind, why))
    cyc.admit(w, final, quota.within_quota(snap.teams[w.team], w.itype, w.total), [])
    return True
