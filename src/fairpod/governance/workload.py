"""A job as the engine sees it (``Workload``): its replicas and their request, where it runs, and what the rules
read of it (priority, queue shape, preemptions, elastic range, fallback instance types)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fairpod.model.resources import Res

Vec = list[int]  # a mutable resource vector [acc, mcpu, mib]

# A job preempted this often is protected (engine rule 7, ``ordering`` and ``protected``). Its queue shape carries
# ``PROTECTED`` (``Snapshot.add_pending``, ``requeue``): a protected job that waits for room for its team's
# protected jobs fails apart from the team's other jobs of its size, which may still borrow.
PROTECTED_AFTER = 5
PROTECTED = ("protected",)


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
