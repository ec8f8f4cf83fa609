"""The memory: the engine's snapshot and the live attempts (``runs``, ``slots``), built from the store and thrown
away (rebuilt) when a store write fails; and what the core looks up about a node (its instance group, whether its
accelerators are real GPUs, how many slots make one GPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fairpod.executors import registry
from fairpod.governance import Snapshot, Workload, history
from fairpod.governance.build import empty_snapshot, engine_team
from fairpod.model.cluster import InstanceGroup
from fairpod.model.jobs import JobState, fallback_choices
from fairpod.model.keys import run_key
from fairpod.model.nodes import DeepHealthCheck
from fairpod.model.resources import Res, node_res
from fairpod.model.spec import ClusterSpec
from fairpod.sandbox import capabilities
from fairpod.server.core.state import CoreState
from fairpod.server.core.transitions import array_holds, backoff, resize
from fairpod.server.runs import Run, Slots, to_engine
from fairpod.store.records import EngineJob, Job, Node


class Memory:
    """The part of :class:`fairpod.server.core.ControlPlane` that keeps the memory (the lock is held). Its
    methods take the core's state as their ``self`` (:class:`fairpod.server.core.state.CoreState`)."""

    def workload(self: CoreState, job: Job | EngineJob, spec: ClusterSpec | None = None) -> Workload:
        """The engine's workload of a job, from its whole record or from the fields the memory is built from
        (``EngineJob``: one code path for both, so a restart decides as the memory it replaces did)."""
        spec = spec or self.spec
        e = job if isinstance(job, EngineJob) else EngineJob.of(job)
        return Workload(
            to_engine(e.id), e.team, e.instance_type, e.nodes, Res(e.acc, e.mcpu, e.mib),
            priority=e.priority, submit=e.submit_time, seq=e.seq, enqueued=e.enqueued_at,
            expected=e.expected_duration_seconds,
            min_runtime=min(e.min_runtime_seconds, spec.policy.max_min_runtime_seconds),
            passed_only=e.passed_only, user=e.user or "",
            checkpoint=e.checkpoint_at, reason=e.reason, preemptions=e.preemptions,
            borrowed_from=dict(e.borrowed_from or {}),  # admitted by borrowing: consolidation may move it
            topology=e.required_topology or e.preferred_topology,
            topology_required=e.required_topology is not None,
            **resize.workload_fields(e),  # kind and size (governance.kinds: a service's minimum is quota-bound)
            choices=fallback_choices(e.spec, spec) if e.spec is not None else (),
        )  # fmt: skip


    def _rebuild(self: CoreState, unfinished: list[EngineJob] | None = None) -> None:
        """The engine's snapshot from the store: nodes, teams, running jobs (whose attempt is not stopping)
        and pending jobs. ``unfinished``: the store's unfinished jobs, read already (``Store.engine_jobs``)."""
        self._groups.clear()
        if unfinished is None:
            unfinished = self.store.engine_jobs()
        self.snap = self.build_snapshot(self.spec, unfinished)
        array_holds.hold_back(self, unfinished)  # throttled arrays: tasks beyond the limit
        backoff.hold_back(self, unfinished)  # restarts still backing off
        self.publish_facts()  # what reads of one job or node take while the next turn runs (core.facts)


    def build_snapshot(self: CoreState, spec: ClusterSpec, unfinished: list[EngineJob] | None = None) -> Snapshot:
        """The engine's view of the store's nodes and unfinished jobs under ``spec``; call it holding the lock.
        ``unfinished``: the store's unfinished jobs, read already."""
        meter = self.budgets.meter
        return snapshot_of(self, spec, self.store.list_nodes(),
                           self.store.engine_jobs() if unfinished is None else unfinished,
                           self.history.saved(self), None if meter is None else meter.used)

    def trial_snapshots(self: CoreState, specs: list[ClusterSpec]) -> list[Snapshot]:
        """A dry run's snapshots (``Core.trial_snapshots``), without the core's lock: the store read in one
        transaction (on SQLite one snapshot of the database: the last commit, never a turn half written), the
        memory the store does not hold (fair-share history, budget hours) from ``engine_facts``."""
        fair, used = self.engine_facts(lambda f: (f.fair_share(), f.budget_used()))[0]
        if fair is None:  # the live snapshot keeps none: what the store kept
            fair = self.history.saved(self)
        with self.store.tx(write=False) as t:
            nodes, unfinished = t.list_nodes(), t.engine_jobs()
        return [snapshot_of(self, spec, nodes, unfinished, fair, used) for spec in specs]

    def _load_runs(self: CoreState, unfinished: list[EngineJob]) -> list[tuple[EngineJob, Run]]:
        """``runs`` and ``slots`` from the store's ``unfinished`` jobs (read by the caller, once for this and
        :meth:`_rebuild`); returns the attempts found live that the store does not know as started (the control
        plane died between starting them and recording it)."""
        live = self.executor.running()
        self.runs, self.slots = {}, Slots()
        unrecorded = []
        for job in unfinished:
            if job.state not in (JobState.RUNNING, JobState.PREEMPTED):
                continue
            run = Run.from_json(job.run_state, job.attempt)
            if live.get(run_key(job.name, job.id)) == job.attempt and not run.launched:
                unrecorded.append((job, run))
            self.runs[job.id] = run
            for node, slots in run.slots.items():
                self.slots.mark(node, slots)
        return unrecorded


    def _save_run(self: CoreState, job: Job, run: Run, **changes: Any) -> Job:
        """Store the run with ``changes``; in the turn's batch, one ``run_state`` per job per commit
        (``BatchingStore.save_run``)."""
        return self.store.save_run(job.id, run, changes)


    def _unsnap(self: CoreState, jid: int) -> None:
        """The job leaves the engine's view: no longer running there, not pending either."""
        if to_engine(jid) in self.snap.running:
            self.snap.finish(to_engine(jid))
        self.snap.remove_pending(to_engine(jid))


    def _release(self: CoreState, job: Job, run: Run) -> None:
        for node, slots in run.slots.items():
            self.slots.give_back(node, slots)
        self.runs.pop(job.id, None)
        self._unsnap(job.id)


    def _gpus_are_real(self: CoreState, node: str) -> bool:
        """Whether a node's accelerators are real GPUs (its instance group says ``accelerators_are: gpus``)."""
        g = self._group_of(node)
        return g is not None and g.accelerators_are == "gpus"


    def _group_of(self: CoreState, node: str) -> InstanceGroup | None:
        """A node's instance group (None: no such node or group), remembered per node name until the snapshot
        is rebuilt (the spec or the nodes changed): one query per node, not one per launch."""
        if not self._groups:  # the first look after a rebuild: every node's group in one query, not one each
            groups = {g.name: g for g in self.spec.cluster.instance_groups}
            self._groups.update((nd.name, groups.get(nd.instance_group)) for nd in self.store.list_nodes())
        if node not in self._groups:
            nd = self.store.get_node(node)
            self._groups[node] = next((g for g in self.spec.cluster.instance_groups
                                       if nd is not None and g.name == nd.instance_group), None)
        return self._groups[node]


    def _partitions_per_gpu(self: CoreState, node: str) -> int:
        """How many accelerator slots of a node are one GPU: its group's MIG partitions per GPU, else 1."""
        from fairpod.model.catalog import MIG_PROFILES

        g = self._group_of(node)
        if g is None or not g.accelerator_partition_type:
            return 1
        kind = self.spec.catalog()[g.instance_type].accelerator_kind or ""
        return MIG_PROFILES[kind][g.accelerator_partition_type]


    def checkpoint_root(self: CoreState) -> Path:
        return checkpoint_root_of(self.spec, self.home)


    def jobs_on(self: CoreState, name: str) -> list[int]:
        """Jobs with an attempt placed on ``name`` (starting, running or stopping)."""
        with self.lock:
            return [jid for jid, run in self.runs.items() if name in run.nodes or name in run.slots]


def checkpoint_root_of(spec: ClusterSpec, home: Path) -> Path:
    """Where jobs' checkpoint directories live: ``cluster.checkpoint_dir``, else ``$FAIRPOD_HOME/checkpoints``."""
    custom = spec.cluster.checkpoint_dir
    return Path(custom) if custom else home / "checkpoints"


def add_nodes(snap: Snapshot, spec: ClusterSpec, nodes: list[Node], isolating: bool = True) -> None:
    """The stored ``nodes`` of a type ``spec`` knows, into the engine's ``snap`` (schedulable only while the
    cluster's isolation is met: ``isolating``)."""
    cat = spec.catalog()
    for nd in nodes:
        if nd.instance_type in cat:
            snap.add_node(nd.name, nd.instance_type, node_res(cat[nd.instance_type]),
                          schedulable=nd.schedulable and isolating,
                          passed=nd.deep_health_check == DeepHealthCheck.PASSED,
                          topology=spec.node_topology(nd.instance_group, nd.name, nd.labels))


def snapshot_of(cp: CoreState, spec: ClusterSpec, nodes: list[Node], unfinished: list[EngineJob],
                fair_share: dict[str, Any] | None, budget_used: dict[Any, Any] | None) -> Snapshot:
    """The engine's snapshot of ``nodes`` and ``unfinished`` jobs under ``spec``, with the fair-share history and
    the budget hours counted so far given; reads nothing of the core's memory."""
    snap = empty_snapshot(spec, cp.clock())
    isolating = capabilities.required_gap(spec.cluster.isolation, registry.elsewhere(cp.executor.name)) is None
    add_nodes(snap, spec, nodes, isolating)
    for t in spec.teams:
        snap.add_team(engine_team(spec, t.name))
    history.load(snap, fair_share)  # FairShareHistory: the past borrowing goes on
    cp.budgets.fill(snap.teams, spec, snap.now, budget_used)  # budgets: the hours counted so far
    for job in unfinished:
        if job.team not in snap.teams:
            continue
        w = cp.workload(job, spec)
        if job.state == JobState.RUNNING:
            snap.assign(w, [n for n in job.placement if n in snap.nodes])
            w.started = job.started_at
        elif job.state == JobState.PENDING:
            snap.add_pending(w)
    return snap
