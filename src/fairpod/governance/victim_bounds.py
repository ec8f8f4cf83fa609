"""Bounds ``preemption.plan`` checks before it stops any job: would the pending job fit if every candidate (or those
the plan's loop would take, in its order) were stopped? If not, no choice of victims makes it fit and the plan
fails at once, without touching the snapshot."""

from __future__ import annotations

from collections.abc import Sequence

from fairpod.governance import fairshare, topology
from fairpod.governance.nodes import Node
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload


def could_fit(snap: Snapshot, w: Workload, cands: list[Workload], reserved: dict[str, str], level: int) -> bool:
    """For a job with a required topology level (``level``, its index; -1: the cluster lacks it): would one domain
    of that level have ``w.n`` nodes with room for a replica if every candidate were stopped? (A bound before trying
    victims; without a required level ``reaches`` is the tighter bound of the same count.)"""
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


def acc_could_fit(snap: Snapshot, w: Workload, cands: list[Workload]) -> bool:
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


def reaches(snap: Snapshot, w: Workload, cands: list[Workload], within: bool, fitting: set[str],
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

