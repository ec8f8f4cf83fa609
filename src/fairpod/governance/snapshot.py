"""The engine's view of the cluster: nodes, teams with their quotas and queues, running and pending jobs.

A ``Snapshot`` is plain data with integer resource vectors (see ``fairpod.model.resources``) and keeps
its per-instance-type aggregates up to date as jobs are assigned and released, so one scheduling cycle
costs time in the number of teams and candidate jobs, not in the number of queued jobs. The engine
changes the snapshot it is given into the state after its decisions; callers build one from their store
(the control plane) or keep one across events (the simulator).

Longer than fairpod's usual module (~730 lines): the aggregates and the queues they are kept from must change
together in every mutator (assign, finish, add/remove pending, node changes); one class keeps that invariant
in one place (``tests/governance`` checks the aggregates against a recount).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fairpod.governance.lending import idle_lendable, lend_quota
from fairpod.model.resources import Res

Vec = list[int]  # a mutable resource vector [acc, mcpu, mib]

# A job preempted this often is protected (engine rule 7, ``ordering`` and ``scheduler``). Its queue shape carries
# ``PROTECTED`` (``Snapshot.add_pending``, ``requeue``): a protected job that waits for room for its team's
# protected jobs fails apart from the team's other jobs of its size, which may still borrow.
PROTECTED_AFTER = 5
PROTECTED = ("protected",)


@dataclass(slots=True, eq=False)
class Node:
    name: str
    itype: str
    cap: Res
    free: Vec
    schedulable: bool = True
    health_passed: bool = False  # deep health check Passed
    jobs: set[str] = field(default_factory=set)
    stamp: int = 0  # bumped when its free room changes: older entries of it in the fit index are stale
    bucket: int = -1  # its free accelerators when last indexed (its set in ``Snapshot.by_free``)
    topo: tuple[str, ...] = ()  # its domain at each topology level, outermost first ("b1", "b1/r3"; see topology)


@dataclass(slots=True, eq=False)
class Workload:
    """A job as the engine sees it: ``n`` replicas of ``req`` on nodes of ``itype``."""

    id: str
    team: str
    itype: str
    n: int
    req: Res
    priority: int = -1
    submit: float = 0.0
    seq: int = 0
    enqueued: float | None = None  # when it last entered the queue (submit, or its last preemption)
    min_runtime: float = 0.0
    passed_only: bool = False
    topology: str | None = None  # a topology level: all replicas in one domain of it (required) or few (preferred)
    topology_required: bool = False
    preemptions: int = 0  # how often it was preempted so far
    expected: float | None = None  # seconds it is expected to run from its (next) start; None: unknown
    user: str = ""  # who submitted it (per-user limits of its team)
    # elastic (``governance.elastic``): between min_n and max_n replicas; n is the current count (min_n while
    # pending); max_n 0: not elastic
    min_n: int = 0
    max_n: int = 0
    resized: float | None = None  # when it last shrank (no growth again for a while: no grow/shrink cycles)
    # its (minimum) gang is admitted only within its team's quota, never by borrowing, and goes last among a
    # reclaim's victims, as a protected job (a service's minimum replicas; replicas grown above it may borrow)
    quota_bound: bool = False
    # while running
    nodes: list[str] | None = None
    started: float | None = None
    checkpoint: float | None = None  # time of the last reported checkpoint
    checkpoint_due: float | None = None  # when its next checkpoint is due, as it said (fairpod.sdk); None: unknown
    # bookkeeping for users
    reason: str = ""
    borrowed_from: dict[str, int] = field(default_factory=dict)
    # fallback instance types: every (instance type, request per replica) it may run on, in order of preference
    # (the first is ``itype``/``req`` as given); empty: only ``itype``. ``choose`` switches between them.
    choices: tuple[tuple[str, Res], ...] = ()
    total: Res = field(init=False)  # n x req, the whole gang
    # jobs of one shape fit or fail alike: (itype, n, req, passed_only), the topology asked for, and the user
    # in a team with per-user rules
    shape: tuple = field(init=False)

    def __post_init__(self) -> None:
        r = self.req
        self.total = Res(r.acc * self.n, r.mcpu * self.n, r.mib * self.n)
        if self.max_n:
            self.min_n = self.min_n or self.n
            if not 1 <= self.min_n <= self.n <= self.max_n:
                raise ValueError(f"job {self.id!r}: elastic replicas must be 1 <= min {self.min_n} <= "
                                 f"{self.n} <= max {self.max_n}")
        self.shape = (self.itype, self.min_n if self.max_n else self.n, self.req, self.passed_only)
        if self.max_n:
            self.shape += (("elastic", self.max_n),)
        if self.topology is not None:
            self.shape += (self.topology, self.topology_required)
        if self.quota_bound:
            self.shape += ("quota_bound",)

    def choose(self, i: int) -> None:
        """Take choice ``i`` of ``choices`` as its instance type and request (its shape follows)."""
        it, r = self.choices[i]
        self.itype = it
        self.req = r
        self.total = Res(r.acc * self.n, r.mcpu * self.n, r.mib * self.n)
        self.shape = (it, *self.shape[1:2], r, *self.shape[3:])

    def set_n(self, n: int) -> None:
        """Change the replica count of an elastic job (its shape, the key of its queue, stays)."""
        r = self.req
        self.n = n
        self.total = Res(r.acc * n, r.mcpu * n, r.mib * n)

    def ends_by(self) -> float:
        """When a running job is expected to end (inf when unknown)."""
        if self.expected is None or self.started is None:
            return math.inf
        return self.started + self.expected

    def waiting_since(self) -> float:
        """When it last entered the queue (its submit time if it never left it)."""
        return self.enqueued if self.enqueued is not None else self.submit

    def lost_work(self, now: float) -> float:
        """Seconds of work lost if stopped now: since the last checkpoint, or since the start."""
        if self.started is None:
            return 0.0
        since = self.started if self.checkpoint is None or self.checkpoint < self.started else self.checkpoint
        lost = now - since
        return lost if lost > 0.0 else 0.0


@dataclass(slots=True, eq=False)
class Team:
    name: str
    weight: int = 0
    lends: bool = True
    borrows: bool = True
    borrow_limit: int = 50  # percent of quota
    preempt_lower: bool = True
    preempt_newer: bool = False  # also its equal-priority jobs submitted later (``within_team``)
    quota: dict[str, Res] = field(default_factory=dict)
    lend_limit: dict[str, Res] = field(default_factory=dict)  # per instance type; none: all idle quota is lent
    borrow_abs: dict[str, Res] = field(default_factory=dict)  # absolute borrow limit per instance type
    user_cap: int | None = None  # accelerators one user's jobs may run at once in this team
    round_robin: bool = False  # the queue goes round-robin across users (fewest running accelerators first)
    used: dict[str, Vec] = field(default_factory=dict)
    user_acc: dict[str, int] = field(default_factory=dict)  # running accelerators per user
    user_turn: dict[str, int] = field(default_factory=dict)  # per user: the count of starts at its last start
    history: dict[str, float] = field(default_factory=dict)  # decayed mean dominant borrowed share per type
    # per instance type: (accelerator-hours used this period, budget, hard cap), set by the caller (``budget``)
    budget: dict[str, tuple[float, float, bool]] = field(default_factory=dict)
    version: int = 0  # counts changes of its usage (derived views may be cached against it)
    queue: PendingQueue = field(default_factory=lambda: PendingQueue())
    path: tuple[str, ...] = ()  # its group and that group's ancestors, nearest first (``governance.groups``)

    def q(self, itype: str) -> Res:
        return self.quota.get(itype, _ZERO)

    def u(self, itype: str) -> Vec:
        v = self.used.get(itype)
        if v is None:
            v = self.used[itype] = [0, 0, 0]
        return v

    def lendable_now(self, itype: str) -> tuple[int, int, int]:
        """What this team lends of ``itype`` now (0 if it does not lend): idle quota up to its lending limit."""
        if not self.lends:
            return 0, 0, 0
        return idle_lendable(self.q(itype), self.u(itype), self.lend_limit.get(itype))

    @property
    def per_user(self) -> bool:
        """Whether the team has per-user rules (its queue then keeps each user's jobs apart)."""
        return self.user_cap is not None or self.round_robin


_ZERO = Res(0, 0, 0)


@dataclass(slots=True, eq=False)
class Group:
    """A node of the tree of groups (``governance.groups``): teams and groups below it share its quota, the sum of
    theirs, and it lends and borrows for all of them towards the rest of the tree."""

    name: str
    parent: str | None = None
    weight: int = 1
    lends: bool = True
    borrows: bool = True
    borrow_limit: int = 50  # percent of the group's quota
    lend_limit: dict[str, Res] = field(default_factory=dict)
    borrow_abs: dict[str, Res] = field(default_factory=dict)
    teams: list[str] = field(default_factory=list)  # the teams directly below it
    children: list[str] = field(default_factory=list)  # the groups directly below it
    quota: dict[str, Res] = field(default_factory=dict)  # what it holds itself (not its teams'), per instance type


@dataclass(slots=True, eq=False)
class Pool:
    """Per instance type: capacity and what the sharing rules need, summed over teams."""

    cap: Vec = field(default_factory=lambda: [0, 0, 0])  # schedulable nodes
    free: Vec = field(default_factory=lambda: [0, 0, 0])  # free on schedulable nodes
    quota_all: Vec = field(default_factory=lambda: [0, 0, 0])
    quota_lend: Vec = field(default_factory=lambda: [0, 0, 0])  # quota of lenders, each up to its lending limit
    idle_lend: Vec = field(default_factory=lambda: [0, 0, 0])  # sum over lenders of what each lends now
    over: Vec = field(default_factory=lambda: [0, 0, 0])  # sum of max(0, used - quota) over all teams
    reserved_borrow: Vec = field(default_factory=lambda: [0, 0, 0])  # held back for a starving borrower


class PendingQueue:
    """One team's pending jobs, one heap per job shape, merged on the fly in queue order.

    A job's key never changes, so a preempted job re-enters at its original place.
    """

    __slots__ = ("heaps", "live", "tops")

    def __init__(self) -> None:
        self.heaps: dict[tuple, list[tuple[tuple, str]]] = {}
        self.live: dict[str, Workload] = {}
        # the first job of each shape in queue order, (key, job id, shape); None once the queue changed: a cycle
        # asks for the head of each team's queue round after round, and most queues change far less often
        self.tops: list[tuple[tuple, str, tuple]] | None = None

    def __len__(self) -> int:
        return len(self.live)

    def users(self) -> set[str]:
        return {w.user for w in self.live.values()}

    def push(self, w: Workload, key: tuple) -> None:
        self.tops = None
        self.live[w.id] = w
        heapq.heappush(self.heaps.setdefault(w.shape, []), (key, w.id))

    def discard(self, wid: str) -> Workload | None:
        self.tops = None
        return self.live.pop(wid, None)  # its heap entry is dropped lazily

    def _top(self, shape: tuple) -> tuple[tuple, str] | None:
        h = self.heaps[shape]
        while h and h[0][1] not in self.live:
            heapq.heappop(h)
        if not h:
            del self.heaps[shape]
            return None
        return h[0]

    def head(self, skip: set | None = None, user_rank: Callable[[str], tuple] | None = None) -> Workload | None:
        """The first job in queue order whose shape is not in ``skip``; with ``user_rank`` (round-robin across
        users, ``governance.users``), the job of the user with the lowest rank first, then by queue order."""
        if user_rank is None:
            for _, wid, shape in self.ordered():
                if not skip or shape not in skip:
                    return self.live[wid]
            return None
        best: tuple[Any, ...] | None = None
        for shape in list(self.heaps):
            if skip and shape in skip:
                continue
            got = self._top(shape)
            if got is None:
                continue
            top: tuple[Any, ...] = got if user_rank is None else (user_rank(self.live[got[1]].user), *got)
            if best is None or top < best:
                best = top
        return self.live[best[-1]] if best else None

    def ordered(self) -> list[tuple[tuple, str, tuple]]:
        """The first job of each shape in queue order: (key, job id, shape); kept until the queue changes."""
        tops = self.tops
        if tops is None:
            tops = self.tops = sorted((*top, shape) for shape in list(self.heaps)
                                      for top in (self._top(shape),) if top is not None)
        return tops

    def heads(self) -> Iterator[Workload]:
        """The first job of each shape."""
        for shape in list(self.heaps):
            top = self._top(shape)
            if top is not None:
                yield self.live[top[1]]

    def pop(self, w: Workload) -> None:
        self.tops = None
        self.live.pop(w.id, None)
        if w.shape in self.heaps:  # (a job starting on a fallback instance type is queued under its first)
            self._top(w.shape)  # drop it from its heap if on top

    def position(self, wid: str) -> int | None:
        """The 1-based place of ``wid`` in :meth:`in_order` without sorting (O(n)); None if not queued. Safe to
        call from another thread while the engine runs: it reads copies of the heaps."""
        if wid not in self.live:
            return None
        entries = [e for h in list(self.heaps.values()) for e in list(h)]
        mine = min((e for e in entries if e[1] == wid), default=None)
        if mine is None:
            return None
        return 1 + len({e[1] for e in entries if e < mine and e[1] != wid and e[1] in self.live})

    def in_order(self) -> Iterator[Workload]:
        """All pending jobs in queue order (for reports; O(n log n))."""
        entries = sorted(e for h in self.heaps.values() for e in h if e[1] in self.live)
        seen: set[str] = set()
        for _, wid in entries:
            if wid not in seen:
                seen.add(wid)
                yield self.live[wid]


class Snapshot:
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
        self.levels = tuple(topology_levels)  # the topology's levels, outermost first (e.g. block, rack)
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
        self.nodes: dict[str, Node] = {}
        self.by_type: dict[str, list[Node]] = {}
        self.unschedulable: set[str] = set()  # names of nodes that take no new replicas
        # per instance type and free accelerators: a heap of (not passed, free mcpu, free mib, name, stamp), so
        # placement finds the best fit without looking at every node (stale entries are dropped lazily)
        self.fit_index: dict[str, dict[int, list[tuple[bool, int, int, str, int]]]] = {}
        self._index_size: dict[str, int] = {}
        # per instance type and count of free accelerators: the names of the nodes with that many free (kept with
        # the fit index), so the nodes with at least k free (or the nearest to it) are found without looking at the
        # others
        self.by_free: dict[str, dict[int, set[str]]] = {}
        self.teams: dict[str, Team] = {}
        self.groups: dict[str, Group] = {}  # the tree of groups; empty: every team at the top (``governance.groups``)
        self.pools: dict[str, Pool] = {}
        self.running: dict[str, Workload] = {}
        self.running_by: dict[tuple[str, str], dict[str, Workload]] = {}  # (instance type, team) -> running
        self.pending: dict[str, Workload] = {}
        self.waiting: dict[str, Team] = {}  # the teams with jobs queued (``scheduler.run`` looks at these only)
        self.lenders_of: dict[str, list[Team]] = {}  # per instance type: the teams with quota on it, in team order
        # team checks that failed on the team's own quota or borrow limit, by job: (what the check read, its
        # result); ``scheduler`` reuses one across cycles while the team's usage and limits stay as they were
        self.quota_blocked: dict[str, tuple[tuple, tuple[bool, bool, str]]] = {}
        # per team: whether all of its offers in a cycle's rounds are known to fail, with what that read
        # (``scheduler._Cycle.verdict``); kept across cycles while that is unchanged
        self.verdicts: dict[str, tuple] = {}
        # counts changes of the nodes alone (added, removed, schedulable, health, topology): what
        # ``placement.never_fits`` reads; ``scheduler`` keeps its verdicts per job shape while it stays
        self.nodes_version = 0
        self.never_fit: dict[tuple, str | None] = {}
        self.never_at = 0
        self.elastic: dict[str, Workload] = {}  # running elastic jobs (``governance.elastic``)
        self.elastic_holdoff = 60.0  # seconds after a shrink in which an elastic job does not grow again
        self._seq = 0
        self._starts = 0  # jobs started, for the round-robin turns of users
        self.version = 0  # counts changes of usage (assign, unassign) and of nodes, so readers can cache derived views
        self.memo: dict[tuple, Any] = {}  # the engine's cache of derived values, keyed with their versions
        self.cycle = 0  # scheduling cycles run on it (caches valid for one cycle are keyed with it)

    # -- building ------------------------------------------------------------------------------
    def pool(self, itype: str) -> Pool:
        p = self.pools.get(itype)
        if p is None:
            p = self.pools[itype] = Pool()
        return p

    def add_node(self, name: str, itype: str, cap: Res, *, schedulable: bool = True, passed: bool = False,
                 topology: tuple[str, ...] = ()) -> Node:
        """Add a node; ``topology`` is its domain name at each of ``levels`` ("" where unknown)."""
        if name in self.nodes:
            raise ValueError(f"node {name!r} already exists")
        n = Node(name, itype, cap, list(cap), schedulable, passed, topo=domain_ids(name, topology, len(self.levels)))
        self.version += 1
        self.nodes_version += 1
        self.nodes[name] = n
        self.by_type.setdefault(itype, []).append(n)
        self.index(n)
        if schedulable:
            _add(self.pool(itype).cap, cap, 1)
            _add(self.pool(itype).free, cap, 1)
        else:
            self.unschedulable.add(name)
        return n

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        n = self.nodes[name]
        if n.schedulable != schedulable:
            self.version += 1
            self.nodes_version += 1
            n.schedulable = schedulable
            if schedulable:
                self.unschedulable.discard(name)
            else:
                self.unschedulable.add(name)
            _add(self.pool(n.itype).cap, n.cap, 1 if schedulable else -1)
            _add(self.pool(n.itype).free, n.free, 1 if schedulable else -1)

    def remove_node(self, name: str) -> None:
        n = self.nodes[name]
        if n.jobs:
            raise ValueError(f"node {name!r} still runs {sorted(n.jobs)}")
        self.set_schedulable(name, False)
        self.version += 1
        self.nodes_version += 1
        del self.nodes[name]
        self.unschedulable.discard(name)
        self._unbucket(n)
        self.by_type[n.itype].remove(n)

    def update_node(self, name: str, *, passed: bool, topology: tuple[str, ...] | None = None) -> None:
        """A node's deep health check result changed (``passed``), or its topology labels (``topology``: its
        domain name at each level)."""
        n = self.nodes[name]
        topo = n.topo if topology is None else domain_ids(name, topology, len(self.levels))
        if n.health_passed != passed or n.topo != topo:
            self.version += 1
            self.nodes_version += 1
            n.health_passed = passed
            n.topo = topo
            self.index(n)

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
            _add(p.quota_all, q, 1)
            if team.lends:
                _add(p.quota_lend, lend_quota(q, team.lend_limit.get(itype)), 1)
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
            _add(p.quota_all, q, 1)
            _add(p.quota_lend, q, 1)
            _add(p.idle_lend, q, 1)

    def path_of(self, group: str | None) -> tuple[str, ...]:
        """A group and its ancestors, nearest first (a team's ``path``); () for None."""
        out: list[str] = []
        g = group
        while g is not None:
            out.append(g)
            g = self.groups[g].parent
        return tuple(out)

    def index(self, n: Node, *, compact: bool = True) -> None:
        """(Re-)enter node ``n`` in the fit index with its current free room and health."""
        n.stamp += 1
        f = n.free
        if n.bucket != f[0]:
            self._unbucket(n)
            buckets = self.by_free.get(n.itype)
            if buckets is None:
                buckets = self.by_free[n.itype] = {}
            names = buckets.get(f[0])
            if names is None:
                names = buckets[f[0]] = set()
            names.add(n.name)
            n.bucket = f[0]
        heapq.heappush(self.fit_index.setdefault(n.itype, {}).setdefault(f[0], []),
                       (not n.health_passed, f[1], f[2], n.name, n.stamp))
        size = self._index_size[n.itype] = self._index_size.get(n.itype, 0) + 1
        if compact and size > 4 * len(self.by_type[n.itype]) + 64:
            self.fit_index[n.itype] = {}
            self._index_size[n.itype] = 0
            for nd in self.by_type[n.itype]:
                self.index(nd)

    def _unbucket(self, n: Node) -> None:
        if n.bucket >= 0:
            buckets = self.by_free[n.itype]
            names = buckets[n.bucket]
            names.discard(n.name)
            if not names:
                del buckets[n.bucket]
            n.bucket = -1

    def with_free(self, itype: str, at_least: int) -> list[set[str]]:
        """The sets of names of the nodes of ``itype`` with at least ``at_least`` free accelerators."""
        return [names for b, names in self.by_free.get(itype, {}).items() if b >= at_least]

    # -- team usage and the pool aggregates ----------------------------------------------------
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

    # -- jobs ----------------------------------------------------------------------------------
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

    # -- views ---------------------------------------------------------------------------------
    def unallocated(self, itype: str) -> Vec:
        p = self.pool(itype)
        return [max(0, p.cap[d] - p.quota_all[d]) for d in range(3)]

    def lendable(self, itype: str) -> Vec:
        """Capacity others may borrow when idle: lenders' quota (+ unallocated when idle sharing is on)."""
        p = self.pool(itype)
        if not self.idle_sharing:
            return list(p.quota_lend)
        ua = self.unallocated(itype)
        return [p.quota_lend[d] + ua[d] for d in range(3)]


def domain_ids(node: str, values: tuple[str, ...], levels: int) -> tuple[str, ...]:
    """A node's domain id at each level: the path of domain names down to it ("b1", "b1/r3"). A node with no
    name at some level is a domain of its own from there down ("b1/?node"; it shares that domain with no other
    node)."""
    out: list[str] = []
    path = ""
    own = False
    for i in range(levels):
        v = values[i] if i < len(values) else ""
        if not own:
            own = not v
            step = f"?{node}" if own else v
            path = f"{path}/{step}" if path else step
        out.append(path)
    return tuple(out)


def _add(v: Vec, r: Sequence[int], k: int) -> None:
    v[0] += k * r[0]
    v[1] += k * r[1]
    v[2] += k * r[2]
