"""A trace job as the simulator follows it (``SimJob``: its work left, runs, preemptions, lost work, a service's
replica-seconds) and what a replay returns (``SimResult``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fairpod.governance.workload import Workload
from fairpod.model.spec import ClusterSpec
from fairpod.sim.trace import TraceJob


@dataclass(slots=True, eq=False)
class SimJob:
    """A trace job and what happened to it."""

    job: TraceJob
    w: Workload | None  # None: never runnable, not given to the engine
    left: float  # seconds of work still to do
    first_start: float | None = None
    end: float | None = None
    run_start: float | None = None  # start of the current run
    run_seconds: float = 0.0  # over all runs, lost work included
    preemptions: int = 0
    lost_seconds: float = 0.0  # work lost to preemptions
    version: int = 0  # bumped at each start and stop; stale completion events are skipped
    reason: str = ""  # the last Wait reason, or why it can never run
    domains: int | None = None  # domains of its topology level its last run spanned (None: no level asked)
    nodes: tuple[str, ...] = ()  # where its last run ran
    shrinks: int = 0  # elastic: replicas taken away while it ran (not preemptions)
    grows: int = 0
    lost_resize_seconds: float = 0.0  # work lost to restarts from a checkpoint at grows and shrinks
    on: str = ""  # the instance type of its current run
    # a service: replica-seconds of its runs at (up to) its minimum and above it
    at_min_seconds: float = 0.0
    above_min_seconds: float = 0.0

    @property
    def rate(self) -> float:
        """Accelerators in use per second of its current run as a share of ``job.accelerators``: k/nodes for an
        elastic job (or a service) on k replicas, else 1. An elastic job's work goes at this rate too."""
        return len(self.nodes) / self.job.nodes if self.job.min_nodes and self.nodes else 1.0

    @property
    def progress(self) -> float:
        """Work per second of its current run: a service is up at any size (1), else ``rate``."""
        return 1.0 if self.job.kind == "service" else self.rate

    @property
    def wait(self) -> float | None:
        return None if self.first_start is None else self.first_start - self.job.submit


@dataclass(slots=True)
class SimResult:
    spec: ClusterSpec
    teams: list[str]
    jobs: list[SimJob]
    start: float  # first submit
    end: float  # last event
    capacity: int  # accelerators of the whole cluster
    quota: dict[str, int]  # accelerators per team, all instance types
    borrowed: dict[str, float]  # accelerator-seconds per team
    lent: dict[str, float]
    cpu_seconds: float = 0.0  # inside governance.schedule
    cycles: int = 0
    decisions: int = 0
    admits: int = 0
    waits: int = 0
    preemptions: int = 0
    shrinks: int = 0  # elastic jobs: Shrink decisions (not preemptions; the job keeps running)
    grows: int = 0
    # (t, allocated per team, borrowed per team) at every change, teams in ``teams`` order
    timeline: list[tuple[float, tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)

    @property
    def makespan(self) -> float:
        return max(0.0, self.end - self.start)


def expected(j: TraceJob, left: float) -> float | None:
    """What the engine is told a job runs for: an elastic job's time at its minimum size (at most that); a service
    declares none (it runs until deleted, as the control plane's services)."""
    if j.kind == "service":
        return None
    return left * j.nodes / j.min_nodes if j.min_nodes else left
