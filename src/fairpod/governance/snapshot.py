"""The engine's view of the cluster: nodes, teams with their quotas and queues, running and pending jobs.

A ``Snapshot`` is plain data with integer resource vectors (see ``fairpod.model.resources``) and keeps
its per-instance-type aggregates up to date as jobs are assigned and released, so one scheduling cycle
costs time in the number of teams and candidate jobs, not in the number of queued jobs. The engine
changes the snapshot it is given into the state after its decisions; callers build one from their store
(the control plane) or keep one across events (the simulator).

The aggregates and the queues they are kept from change together in every mutator (assign, finish, add/remove
pending, node changes): one class keeps that invariant (``tests/governance`` checks the aggregates against a
recount), its nodes and their indexes in its base ``nodes.NodeIndex``; the parts it holds are in modules of
their own: ``workload`` (a job), ``teams`` (a team, a group), ``pending`` (a team's queue), ``nodes``.
"""

from __future__ import annotations

import math
from typing import Any

from fairpod.governance.lending import lend_quota
from fairpod.governance.nodes import NodeIndex, add
from fairpod.governance.teams import Group, Team
from fairpod.governance.workload import PROTECTED, PROTECTED_AFTER, Vec, Workload


class Snapshot(NodeIndex):
    """Everything one scheduling cycle needs. See module doc."""

    def __init__(
        self,
        *,
        task_ranking: bool = False,
        fair_share: bool = True,
        idle_sharing: bool = False,
        starvation_guard: float = 600.0,
        now: float = 0.0,
        topology_levels: tuple[str, ...] = (),
        history_half_life: float | None = None,
        borrow_limit_while_others_wait: bool = False,
        fallback_borrows: bool = True,
        checkpoint_wait: float = 0.0,
        preempt_min_wait: float = 0.0,
        cost_wait: float = 0.0,
        consolidation: str = "Off",
        reclaim_with_own: bool = False,
        borrow_preempt: bool = False,
        borrow_preempt_max: int | None = None,
        hierarchical_reclaim: bool = False,
        fallback_preempts: bool = False,
        aging: tuple[float, int] = (0.0, 0),
    ) -> None:
        super().__init__(topology_levels)
        # rule 12 (``governance.consolidation``): move borrowed jobs to free whole nodes for a waiting multi-node
        # job: "Off", "WithinQuota" (for a job within its team's quota) or "AlsoBorrowing" (for one that borrows too)
        self.consolidation = consolidation
        # rules 3 and 4 together (``quota.reclaims_with_own``): opt-in, ``policy.reclaim_with_own_jobs``
        self.reclaim_with_own = reclaim_with_own
        # preempting to borrow by priority (``borrow_priority``, ``policy.preempt_to_borrow``): on or off, and the
        # highest priority a borrowed job of another team may have to be stopped for a job that must borrow (None:
        # any lower priority)
        self.borrow_preempt = borrow_preempt
        self.borrow_preempt_max = borrow_preempt_max
        # reclaim within the tree of groups (``hierarchical_reclaim``, ``policy.hierarchical_reclaim``): opt-in
        self.hierarchical_reclaim = hierarchical_reclaim
        # fallback types: preempting within quota before borrowing (``fungibility``, PreemptionOverBorrowing)
        self.fallback_preempts = fallback_preempts
        # priority aging (``aging``): (points per hour waited, most points); the boost of each pending job at the
        # last cycle's start (empty while off)
        self.aging = aging
        self.boosts: dict[str, int] = {}
        # preemption that costs least (``governance.preemption.plan``): a victim whose next checkpoint is due within
        # ``checkpoint_wait`` seconds is not taken before it; a pending job triggers preemption only once it has
        # waited ``preempt_min_wait`` seconds (0: both off)
        self.checkpoint_wait = checkpoint_wait
        self.preempt_min_wait = preempt_min_wait
        # a reclaim whose victims would lose >= 2 x ``cost_wait`` seconds of work per accelerator of the job that
        # reclaims waits until that job has waited ``cost_wait`` (``preemption.plan``; 0: off): the jobs held back
        # so (id -> (until when, the accelerator-seconds their reclaim would lose)), not planned for again until
        # then; and the earliest time one of them may go ahead (a simulator wakes the engine then)
        self.cost_wait = cost_wait
        self.cost_held: dict[str, tuple[float, float]] = {}
        self.retry_at = math.inf
        # fallback instance types (``Workload.choices``): take the first type the job fits now even by borrowing
        # (Kueue's whenCanBorrow: Borrow), or a later type that fits within quota first (TryNextFlavor)
        self.fallback_borrows = fallback_borrows
        self.task_ranking = task_ranking
        self.fair_share = fair_share
        # FairShareHistory (``governance.history``): the half-life of past borrowing, when it was last folded in,
        # and each team's borrowed share per instance type since then
        self.history_half_life = history_half_life
        self.history_at: float | None = None
        self.history_rate: dict[str, dict[str, float]] = {}
        self.idle_sharing = idle_sharing
        self.starvation_guard = starvation_guard
        self.borrow_limit_while_others_wait = borrow_limit_while_others_wait  # rule 3: limits bind only then
        self.now = now
        self.teams: dict[str, Team] = {}
        self.groups: dict[str, Group] = {}  # the tree of groups; empty: every team at the top (``governance.groups``)
        self.running: dict[str, Workload] = {}
        self.running_by: dict[tuple[str, str], dict[str, Workload]] = {}  # (instance type, team) -> running
        self.pending: dict[str, Workload] = {}
        self.waiting: dict[str, Team] = {}  # the teams with jobs queued (a cycle looks at these only)
        self.lenders_of: dict[str, list[Team]] = {}  # per instance type: the teams with quota on it, in team order
        # team checks that failed on the team's own quota or borrow limit, by job: (what the check read, its
        # result); ``scheduler`` reuses one across cycles while the team's usage and limits stay as they were
        self.quota_blocked: dict[str, tuple[tuple, tuple[bool, bool, str]]] = {}
        # per team: whether all of its offers in a cycle's rounds are known to fail, with what that read
        # (``verdicts.Verdicts.verdict``); kept across cycles while that is unchanged
        self.verdicts: dict[str, tuple] = {}
        self.never_fit: dict[tuple, str | None] = {}
        self.never_at = 0
        self.elastic: dict[str, Workload] = {}  # running elastic jobs (``governance.elastic``)
        self.elastic_holdoff = 60.0  # seconds after a shrink in which an elastic job does not grow again
        self._seq = 0
        self._starts = 0  # jobs started, for the round-robin turns of users
        self.memo: dict[tuple, Any] = {}  # the engine's cache of derived values, keyed with their versions
        self.cycle = 0  # scheduling cycles run on it (caches valid for one cycle are keyed with it)

    def add_team(self, team: Team) -> None:
        if team.name in self.teams:
            raise ValueError(f"team {team.name!r} already exists")
        self.teams[team.name] = team
        if team.queue:
            self.waiting[team.name] = team
        for itype in team.quota:
            self.lenders_of.setdefault(itype, []).append(team)
        if team.path:
            self.groups[team.path[0]].teams.append(team.name)
        for itype, q in team.quota.items():
            p = self.pool(itype)
            add(p.quota_all, q, 1)
            if team.lends:
                add(p.quota_lend, lend_quota(q, team.lend_limit.get(itype)), 1)
        for itype in team.quota:
            self._account(team, itype, 1)

    def add_group(self, group: Group) -> None:
        """Add a group of the tree (its parent first); a team joins it with ``Team.path``."""
        if group.name in self.groups:
            raise ValueError(f"group {group.name!r} already exists")
        if group.parent is not None and group.parent not in self.groups:
            raise ValueError(f"group {group.name!r}: unknown parent {group.parent!r}")
        self.groups[group.name] = group
        if group.parent is not None:
            self.groups[group.parent].children.append(group.name)
        for itype, q in group.quota.items():
            # a group's own quota is never used by the group itself: always idle, lendable to the teams below it
            # first (``groups.flow_ok`` says to whom); counted here as a lender's that lends it all
            p = self.pool(itype)
            add(p.quota_all, q, 1)
            add(p.quota_lend, q, 1)
            add(p.idle_lend, q, 1)

    def path_of(self, group: str | None) -> tuple[str, ...]:
        """A group and its ancestors, nearest first (a team's ``path``); () for None."""
        out: list[str] = []
        g = group
        while g is not None:
            out.append(g)
            g = self.groups[g].parent
        return tuple(out)

    def _account(self, team: Team, itype: str, sign: int) -> None:
        """Add (sign=1) or remove (sign=-1) the team's contribution to the pool's idle/over sums."""
        p = self.pool(itype)
        q = team.q(itype)
        u = team.u(itype)
        idle = team.lendable_now(itype)
        for d in range(3):
            p.idle_lend[d] += sign * idle[d]
            diff = q[d] - u[d]
            if diff < 0:
                p.over[d] -= sign * diff

    def _use(self, w: Workload, sign: int) -> None:
        self.version += 1
        team = self.teams[w.team]
        team.version += 1
        self._account(team, w.itype, -1)
        u = team.u(w.itype)
        t = w.total
        u[0] += sign * t[0]
        u[1] += sign * t[1]
        u[2] += sign * t[2]
        self._account(team, w.itype, 1)
        if w.user:
            team.user_acc[w.user] = team.user_acc.get(w.user, 0) + sign * t[0]

    def queue_key(self, w: Workload) -> tuple:
        if self.task_ranking:
            if self.boosts:  # priority aging (``governance.aging``): the boost counted at the last cycle's start
                return (-(w.priority + self.boosts.get(w.id, 0)), w.submit, w.seq)
            return (-w.priority, w.submit, w.seq)
        return (w.submit, w.seq)

    def add_pending(self, w: Workload) -> None:
        if w.id in self.pending or w.id in self.running:
            raise ValueError(f"job {w.id!r} is already known")
        if w.team not in self.teams:
            raise ValueError(f"job {w.id!r}: unknown team {w.team!r}")
        if not w.seq:
            self._seq += 1
            w.seq = self._seq
        else:
            self._seq = max(self._seq, w.seq)
        if w.enqueued is None:
            w.enqueued = w.submit
        if w.max_n and w.n != w.min_n:
            w.set_n(w.min_n)
        if w.choices and w.itype != w.choices[0][0]:
            w.choose(0)  # waits for its first choice
        if self.teams[w.team].per_user and ("user", w.user) not in w.shape:
            w.shape = (*w.shape, ("user", w.user))  # one user's jobs fail or fit apart from another's (per-user cap)
        if w.preemptions >= PROTECTED_AFTER and PROTECTED not in w.shape:
            w.shape = (*w.shape, PROTECTED)
        self.pending[w.id] = w
        team = self.teams[w.team]
        team.queue.push(w, self.queue_key(w))
        self.waiting[team.name] = team

    def remove_pending(self, wid: str) -> Workload | None:
        w = self.pending.pop(wid, None)
        if w is not None:
            team = self.teams[w.team]
            team.queue.discard(wid)
            if not team.queue:
                self.waiting.pop(team.name, None)
            self.quota_blocked.pop(wid, None)
        return w

    def assign(self, w: Workload, nodes: list[str]) -> None:
        """Place ``w`` on ``nodes`` (one replica each) and count its usage. Does not touch the queue."""
        r = w.req
        pf = self.pool(w.itype).free
        for name in nodes:
            node = self.nodes[name]
            f = node.free
            f[0] -= r.acc
            f[1] -= r.mcpu
            f[2] -= r.mib
            node.jobs.add(w.id)
            self.index(node)
            if node.schedulable:
                pf[0] -= r.acc
                pf[1] -= r.mcpu
                pf[2] -= r.mib
        w.nodes = list(nodes)
        self.running[w.id] = w
        by = self.running_by.get((w.itype, w.team))
        if by is None:
            by = self.running_by[(w.itype, w.team)] = {}
        by[w.id] = w
        if w.max_n:
            self.elastic[w.id] = w
        self._use(w, 1)

    def unassign(self, w: Workload) -> None:
        """Take ``w`` off its nodes and out of its team's usage (keeps ``w.nodes`` for a later re-assign)."""
        r = w.req
        pf = self.pool(w.itype).free
        for name in w.nodes or ():
            node = self.nodes.get(name)
            if node is None:
                continue
            f = node.free
            f[0] += r.acc
            f[1] += r.mcpu
            f[2] += r.mib
            node.jobs.discard(w.id)
            self.index(node)
            if node.schedulable:
                pf[0] += r.acc
                pf[1] += r.mcpu
                pf[2] += r.mib
        del self.running[w.id]
        del self.running_by[(w.itype, w.team)][w.id]
        if w.max_n:
            self.elastic.pop(w.id, None)
        self._use(w, -1)

    def move_replica(self, w: Workload, rank: int, node: str) -> str:
        """Replica ``rank`` of the running ``w`` holds ``node`` from now on (``governance.relocation``): its request
        leaves its old node and takes room on ``node``; its team's usage is unchanged (same instance type). Returns
        the node it left."""
        nodes = list(w.nodes or ())
        old = nodes[rank]
        for name, k in ((old, 1), (node, -1)):
            nd = self.nodes.get(name)
            if nd is None:  # the old node left the cluster
                continue
            add(nd.free, w.req, k)
            if k < 0:
                nd.jobs.add(w.id)
            else:
                nd.jobs.discard(w.id)
            self.index(nd)
            if nd.schedulable:
                add(self.pool(nd.itype).free, w.req, k)
        nodes[rank] = node
        w.nodes = nodes
        self.version += 1
        return old

    def start(self, w: Workload, nodes: list[str], now: float) -> None:
        """A pending job starts on ``nodes``."""
        self.pending.pop(w.id, None)
        team = self.teams[w.team]
        team.queue.pop(w)
        if not team.queue:
            self.waiting.pop(team.name, None)
        self.quota_blocked.pop(w.id, None)
        self.assign(w, nodes)
        w.started = now
        if team.round_robin:
            self._starts += 1
            team.user_turn[w.user] = self._starts

    def finish(self, wid: str) -> Workload:
        """A running job ended (any way): free its nodes."""
        w = self.running[wid]
        self.unassign(w)
        w.nodes = None
        return w

    def requeue(self, w: Workload, now: float) -> None:
        """A preempted job goes back to its original place in its team's queue."""
        if w.id in self.running:
            self.unassign(w)
        w.nodes = None
        w.started = None
        w.enqueued = now
        if w.max_n and w.n != w.min_n:
            w.set_n(w.min_n)  # an elastic job waits for (and starts with) its minimum
        if w.choices and w.itype != w.choices[0][0]:
            w.choose(0)  # waits for its first choice again
        if w.preemptions >= PROTECTED_AFTER and PROTECTED not in w.shape:
            w.shape = (*w.shape, PROTECTED)  # protected from now on: queued apart from its unprotected kind
        self.pending[w.id] = w
        team = self.teams[w.team]
        team.queue.push(w, self.queue_key(w))
        self.waiting[team.name] = team

    def lendable(self, itype: str) -> Vec:
        """Capacity others may borrow when idle: lenders' quota (+ unallocated when idle sharing is on)."""
        p = self.pool(itype)
        if not self.idle_sharing:
            return list(p.quota_lend)
        ua = self.unallocated(itype)
        return [p.quota_lend[d] + ua[d] for d in range(3)]
