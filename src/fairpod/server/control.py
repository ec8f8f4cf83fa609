"""The control plane's core: one object that owns the store, the executor and the engine's snapshot.

Two copies of the truth live here: the store (it survives a crash) and, in memory, the engine's snapshot and
the live attempts (``runs``, ``slots``). Each state change has exactly one owner, a method of
``ControlPlane`` that writes both under the one lock:

========================  ==================================================================================
transition                owner
========================  ==================================================================================
queue a job               :meth:`ControlPlane.submit` (submits that arrive together: one transaction)
admit (engine decision)   :meth:`ControlPlane.admit`: Running, placement; the attempt waits for its victims
launch                    :meth:`ControlPlane._launch_unlocked`: accelerator slots, the executor starts the replicas
a replica's exit          :meth:`ControlPlane.exit`
begin a stop              :meth:`ControlPlane.begin_stop` (preempt, cancel, restart, fail)
every replica stopped     :meth:`ControlPlane.stopped`: Pending again (preempt, restart) or finished
finish                    :meth:`ControlPlane.finish`: Succeeded, Failed, Cancelled
node fault and recovery   :meth:`ControlPlane.node_fault`, :meth:`ControlPlane.node_recovered`,
                          :meth:`ControlPlane.update_node` (cordon, health), ``add_node``, ``remove_node``
========================  ==================================================================================

The store is written first, then the memory. When a store write fails, the memory is thrown away and
rebuilt from the store (:meth:`ControlPlane.reload`), so the two never disagree for longer than one call.
``reconcile_once`` is one turn of the loop: collect replica exits, run one engine cycle, apply its decisions,
commit, acknowledge the exits to the executor, launch what is ready: the processes start with the lock let
go, and their start is recorded under it after (:meth:`ControlPlane._launch_unlocked`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from fairpod.executors.base import Executor, ExecutorError, JobLaunch, ReplicaExit, ReplicaLaunch
from fairpod.governance import Admit, Preempt, Snapshot, Wait, Workload, history, net_changes, schedule
from fairpod.governance.build import empty_snapshot, engine_team
from fairpod.governance.decisions import Grow, Shrink
from fairpod.model.jobs import JobSpec, JobState, ResolvedJob, fallback_choices, resolve_job
from fairpod.model.nodes import DeepHealthCheck, NodeHealth
from fairpod.model.resources import Res, node_res
from fairpod.model.spec import ClusterSpec
from fairpod.sandbox import capabilities
from fairpod.server import arrays, backoff, diskfull, elastic, eta, membership
from fairpod.server.batch import BatchingStore
from fairpod.server.budgets import BudgetKeeper
from fairpod.server.errors import InvalidJob, JobExists, NeverFits, Problem, WrongState
from fairpod.server.fairshare_history import HistoryKeeper
from fairpod.server.nodes import ACTION_STATUS, sync_nodes
from fairpod.server.retention import Retention
from fairpod.server.runs import (
    STOP_CANCEL,
    STOP_FAIL,
    STOP_PREEMPT,
    STOP_RESTART,
    Run,
    Slots,
    SlotsBusy,
    failure_kind,
    job_id_of,
    job_key,
    usage_message,
)
from fairpod.server.submits import Submit, SubmitQueue
from fairpod.server.turn_gate import TurnGate
from fairpod.server.usage import UsageSampler
from fairpod.server.watchdog import Watchdog
from fairpod.store import AlreadyExists, Store, StoreError
from fairpod.store.records import Job, Node

__all__ = ["ControlPlane", "Problem", "job_id_of", "job_key", "sync_nodes"]

log = logging.getLogger("fairpod.control")

STORE_ERRORS = (StoreError, SQLAlchemyError)


class ControlPlane:
    def __init__(
        self,
        store: Store,
        executor: Executor,
        home: Path,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = BatchingStore(store)  # batches the reconcile loop's job writes (fairpod.server.batch)
        self.executor = executor
        self.home = Path(home)
        self.clock = clock
        self.lock = threading.RLock()
        self.gate = TurnGate()  # the reconcile turn takes the lock ahead of waiting submits
        self.submits = SubmitQueue()  # submits waiting for the lock: written together (server.submits)
        self.wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs: dict[int, Run] = {}
        self.slots = Slots()
        self.eta = eta.Estimates()  # estimated start times of pending jobs (its own thread, started by start())
        rec = store.get_spec()
        if rec is None:
            raise RuntimeError("the store holds no cluster spec; apply one first")
        self.spec: ClusterSpec = rec.spec
        self.cycles = 0
        self.cycle_seconds = 0.0
        self.usage = UsageSampler()  # usage history and cycle timings for the dashboard and /metrics
        self.retention = Retention()  # deletes what policy.retention_days no longer keeps
        self.watchdog = Watchdog()  # runtime limits and hang detection
        self.history = HistoryKeeper()  # FairShareHistory kept across restarts
        self.budgets = BudgetKeeper()  # teams' accelerator-hours in the current budget periods
        self.health: Any = None  # fairpod.health.manager.HealthManager, when node health runs
        self.array_holds: dict[int, arrays.Hold] = {}  # throttled job arrays: their tasks kept out of the engine
        self.restart_holds: dict[int, float] = {}  # restarts backing off (fairpod.server.backoff)
        self._groups: dict[str, Any] = {}  # node -> its instance group or None (cleared when rebuilt)
        # extra env of every launch (API URL, job token: fairpod.server.jobtoken.launch_env)
        self.launch_env: Callable[[Job], dict[str, str]] = lambda job: {}
        with self.lock:
            self._recover()

    # -- the memory: built from the store, thrown away when a store write fails ------------------------
    def workload(self, job: Job, spec: ClusterSpec | None = None) -> Workload:
        spec = spec or self.spec
        return Workload(
            str(job.id), job.team, job.instance_type, job.nodes, Res(job.acc, job.mcpu, job.mib),
            priority=job.priority, submit=job.submit_time, seq=job.seq, enqueued=job.enqueued_at,
            expected=job.spec.expected_duration_seconds,
            min_runtime=min(job.spec.min_runtime_seconds, spec.policy.max_min_runtime_seconds),
            passed_only=job.spec.deep_health_check_passed_nodes_only, user=job.spec.user or "",
            checkpoint=job.checkpoint_at, reason=job.reason, preemptions=job.preemptions,
            topology=job.spec.required_topology or job.spec.preferred_topology,
            topology_required=job.spec.required_topology is not None, **elastic.workload_fields(job),
            choices=fallback_choices(job.spec, spec),
        )  # fmt: skip

    def _rebuild(self) -> None:
        """The engine's snapshot from the store: nodes, teams, running jobs (whose attempt is not stopping)
        and pending jobs."""
        self._groups.clear()
        self.snap = self.build_snapshot(self.spec)
        unfinished = self.store.list_jobs(finished=False)
        arrays.hold_back(self, unfinished)  # throttled arrays: tasks beyond the limit
        backoff.hold_back(self, unfinished)  # restarts still backing off

    def build_snapshot(self, spec: ClusterSpec) -> Snapshot:
        """The engine's view of the store's nodes and unfinished jobs under ``spec`` (the live one, or one a
        dry run tries); call it holding the lock."""
        snap = empty_snapshot(spec, self.clock())
        cat = spec.catalog()
        isolating = capabilities.required_gap(spec.cluster.isolation, self.executor.name) is None
        for nd in self.store.list_nodes():
            if nd.instance_type not in cat:
                continue
            snap.add_node(nd.name, nd.instance_type, node_res(cat[nd.instance_type]),
                          schedulable=nd.schedulable and isolating,
                          passed=nd.deep_health_check == DeepHealthCheck.PASSED,
                          topology=spec.node_topology(nd.instance_group, nd.name, nd.labels))
        for t in spec.teams:
            snap.add_team(engine_team(spec, t.name))
        history.load(snap, self.history.saved(self))  # FairShareHistory: the past borrowing goes on
        self.budgets.fill(snap.teams, spec, snap.now)  # budgets: the hours counted so far
        for job in self.store.list_jobs(finished=False):
            if job.team not in snap.teams:
                continue
            w = self.workload(job, spec)
            if job.state == JobState.RUNNING:
                snap.assign(w, [n for n in job.placement if n in snap.nodes])
                w.started = job.started_at
            elif job.state == JobState.PENDING:
                snap.add_pending(w)
        return snap

    def _load_runs(self) -> list[tuple[Job, Run]]:
        """``runs`` and ``slots`` from the store; returns the attempts found live that the store does not
        know as started (the control plane died between starting them and recording it)."""
        live = self.executor.running()
        self.runs, self.slots = {}, Slots()
        unrecorded = []
        for job in self.store.list_jobs(state=[JobState.RUNNING, JobState.PREEMPTED]):
            run = Run.from_json(job.run_state, job.attempt)
            if live.get(job_key(job)) == job.attempt and not run.launched:
                unrecorded.append((job, run))
            self.runs[job.id] = run
            for node, slots in run.slots.items():
                self.slots.mark(node, slots)
        return unrecorded

    def reload(self) -> None:
        """Forget the memory and build it again from the store (after a failed store write)."""
        with self.lock:
            self._load_runs()
            self._rebuild()

    @contextmanager
    def _change(self) -> Iterator[None]:
        """One transition: under the lock; if the store refuses a write, the memory goes back to the store's."""
        with self.lock:
            try:
                yield
            except STORE_ERRORS:
                log.exception("store write failed; rebuilding the control plane's memory from the store")
                self.reload()
                raise

    @contextmanager
    def _turn(self) -> Iterator[None]:
        """``_change()`` for the reconcile turn: the lock is taken ahead of submits waiting for it."""
        with self.gate.turn():
            self.lock.acquire()
        try:
            with self._change():
                yield
        finally:
            self.lock.release()

    def _recover(self) -> None:
        """Start-up: re-adopt live replicas, take in exits not acknowledged, rebuild the snapshot."""
        exits = self.executor.adopt(ack=False)
        live = self.executor.running()
        unrecorded = self._load_runs()
        self._rebuild()
        for job, run in unrecorded:
            self._started(job, run)
        for e in exits:
            self.exit(e)
        # replicas that ended unseen (an executor that keeps no exits across restarts)
        for jid, run in list(self.runs.items()):
            job = self.store.get_job(jid)
            if job is None or not run.launched or live.get(job_key(job)) == run.attempt:
                continue
            for rank in range(job.nodes):
                run.exits.setdefault(str(rank), "ended while the control plane was down")
                run.codes.setdefault(str(rank), None)
            if run.stopping is None:
                if all(c == 0 for c in run.codes.values()):
                    self.finish(job, run, JobState.SUCCEEDED, "all replicas exited 0")
                    continue
                self.begin_stop(job, run, failure_kind(job), "replicas ended while the control plane was down")
            self.stopped(job, run)
        for jid, run in list(self.runs.items()):
            job = self.store.get_job(jid)
            if job is not None and job.state == JobState.PREEMPTED and not run.launched:
                self.stopped(job, run)
        self.executor.ack(exits)  # every write above is committed (no batch at start-up)

    # -- events and store helpers --------------------------------------------------------------
    def event(self, kind: str, msg: str, job: Job | None = None, /, **data: Any) -> None:
        self.store.append_event(kind, msg, job_id=job.id if job else None, team=job.team if job else None,
                                node=data.pop("node", None), data=data)

    def _save_run(self, job: Job, run: Run, **changes: Any) -> Job:
        return self.store.update_job(job.id, {"run_state": run.to_json(), **changes})

    def _unsnap(self, jid: int) -> None:
        """The job leaves the engine's view: no longer running there, not pending either."""
        if str(jid) in self.snap.running:
            self.snap.finish(str(jid))
        self.snap.remove_pending(str(jid))

    # -- user actions --------------------------------------------------------------------------
    def submit(self, spec: JobSpec, actor: str, key: str | None = None) -> Job:
        """Queue a job. With an idempotency ``key`` a repeated submit by the same ``actor`` returns the job the
        first one created (whatever its state now) instead of a second job. Submits that wait for the lock
        together are written in one transaction (:mod:`fairpod.server.submits`)."""
        spec = spec.model_copy(update={"user": actor})  # who submitted it: the caller, whatever was sent
        req = Submit(spec, actor, key, self.spec, self._checked(spec))  # validated before the lock: it only reads
        self.submits.add(req)
        self.gate.yield_to_turn()
        with self._change():
            if not req.done:  # not written yet by a submit ahead of it: this one writes the group
                self._commit_submits()
        if req.error is not None:
            raise req.error
        assert req.job is not None
        if req.created:
            self.wake.set()
        return req.job

    def _commit_submits(self) -> None:
        """Write every queued submit in one transaction, then put the new jobs in the engine's queue (the lock
        is held). A name already taken fails only its own submit: the group is then written one by one."""
        group = self.submits.take()
        try:
            try:
                self._write_submits(group)
            except AlreadyExists:
                if len(group) == 1:
                    raise
                for one in group:
                    try:
                        self._write_submits([one])
                    except AlreadyExists as e:
                        one.error, one.done = JobExists(str(e)), True
        except AlreadyExists as e:
            group[0].error, group[0].done = JobExists(str(e)), True
        except BaseException as e:  # the store refused the write: every submit not answered yet fails with it
            for one in group:
                if not one.done:
                    one.error, one.done = e, True
            raise

    def _write_submits(self, group: list[Submit]) -> None:
        """One transaction: each submit's job, its event and its audit entry (or the job an earlier submit with
        the same idempotency key created); answers and the engine's queue change only once it committed."""
        answers: list[tuple[Submit, Job | None, BaseException | None, bool]] = []
        with self.store.tx() as t:
            for r in group:
                if r.key is not None and (jid := t.submitted_with(r.actor, r.key)) is not None:
                    earlier = t.get_job(jid)
                    if earlier is not None:
                        answers.append((r, earlier, None, False))
                        continue
                checked = r.checked if self.spec is r.cluster else self._checked(r.spec)  # the spec changed
                if isinstance(checked, (InvalidJob, NeverFits)):
                    answers.append((r, None, checked, False))
                    continue
                job = t.insert_job(r.spec, checked, reason="queued")
                t.append_events([{"kind": "JobSubmitted", "message": f"job {r.spec.name} submitted by {r.actor}",
                                  "job_id": job.id, "team": job.team, "data": {"actor": r.actor}}])
                t.append_audit(r.actor, "job.submit", f"{job.team}/{job.name}", {"id": job.id})
                if r.key is not None:
                    t.remember_submit(r.actor, r.key, job.id)
                answers.append((r, job, None, True))
        self.submits.commits += 1
        self.submits.written += len(group)
        for r, job, err, created in answers:
            if created and job is not None:
                self.snap.add_pending(self.workload(job))
            r.job, r.error, r.created, r.done = job, err, created, True

    def _checked(self, spec: JobSpec) -> ResolvedJob | InvalidJob | NeverFits:
        """:meth:`_admissible`, its error returned rather than raised."""
        try:
            return self._admissible(spec)
        except (InvalidJob, NeverFits) as e:
            return e

    def _admissible(self, spec: JobSpec) -> ResolvedJob:
        """The job checked against the cluster: InvalidJob or NeverFits with the reason, else its resolution."""
        try:
            resolved = resolve_job(spec, self.spec)
        except ValueError as e:
            raise InvalidJob(str(e)) from None
        if spec.command == []:
            raise InvalidJob("the job has no command: give one after --")
        elastic.check(self, spec)
        nevers = [self._never_fits(it, spec.nodes) for it in (resolved.instance_type,
                                                               *(f[0] for f in resolved.fallbacks))]
        if all(nevers):
            raise NeverFits("; ".join(n for n in nevers if n))
        return resolved

    def submit_array(self, spec: JobSpec, text: str, actor: str, key: str | None = None) -> list[Job]:
        """Queue every task of the job array ``text`` (``0-9%2``, ``1,3,5``) in one transaction; with a
        throttle the tasks beyond it are held (:mod:`fairpod.server.arrays`). An idempotency ``key`` repeated
        by the same ``actor`` returns the tasks the first request created."""
        indices, limit = arrays.plan(spec, text)
        with self._change():
            if key is not None and (jid := self.store.submitted_with(actor, key)) is not None:
                first = self.store.get_job(jid)
                earlier = arrays.same_array(self.store, first) if first is not None else None
                if earlier is not None:
                    return earlier
            spec = spec.model_copy(update={"user": actor})  # who submitted it: the caller, whatever was sent
            resolved = self._admissible(spec)
            try:
                with self.store.tx() as t:
                    tasks = arrays.insert_tasks(t, spec, resolved, text, indices, limit, actor)
                    if key is not None:
                        t.remember_submit(actor, key, tasks[0].id)
            except AlreadyExists as e:
                raise JobExists(str(e)) from None
            arrays.admit_tasks(self, tasks, limit)
        self.wake.set()
        return tasks

    def _never_fits(self, itype: str, n: int) -> str | None:
        nodes = self.snap.by_type.get(itype, [])
        if not nodes and itype not in {q for t in self.spec.teams for q in self.spec.team_quota(t)}:
            have = ", ".join(sorted(self.snap.by_type)) or "none"
            return f"the cluster has no {itype} nodes (it has: {have})"
        # nodes may still be joining (a Ray node starting): the spec's instance groups count as well
        declared = sum(g.count for g in self.spec.cluster.instance_groups if g.node_type == itype)
        have = max(len(nodes), declared)
        if nodes and have < n:
            return f"the job asks for {n} {itype} nodes; the cluster has {have}"
        return None

    def cancel(self, job: Job, actor: str) -> Job:
        with self._change():
            job = self.store.get_job(job.id) or job
            if job.state.finished:
                raise WrongState(f"job {job.name} is already {job.state.value}", "job finished")
            if job.state == JobState.PENDING:
                self.snap.remove_pending(str(job.id))
                job = self.store.update_job(job.id, {"state": JobState.CANCELLED, "reason": f"cancelled by {actor}",
                                                     "finished_at": self.clock()})
                self.event("JobCancelled", f"job {job.name} cancelled by {actor}", job)
            else:
                run = self.runs.setdefault(job.id, Run(attempt=job.attempt))
                if run.stopping == STOP_PREEMPT or run.stopping is None:
                    self.begin_stop(job, run, STOP_CANCEL, f"cancelled by {actor}")
                    if job.state == JobState.RUNNING:
                        self.event("JobCancelling", f"job {job.name} is stopping: cancelled by {actor}", job)
                job = self.store.get_job(job.id) or job
                if not run.launched:
                    self.stopped(job, run)
                    job = self.store.get_job(job.id) or job
            self.store.append_audit(actor, "job.cancel", f"{job.team}/{job.name}", {"id": job.id})
        self.wake.set()
        return job

    def report_progress(self, job: Job, step: int | None, checkpoint: str | None) -> Job:
        with self._change():
            now = self.clock()
            changes: dict[str, Any] = {"checkpoint_step": step}
            if checkpoint:
                changes.update(checkpoint_at=now, checkpoint_path=checkpoint)
            job = self.store.update_job(job.id, changes)
            w = self.snap.running.get(str(job.id))
            if w is not None and checkpoint:
                w.checkpoint = now
            return job

    def replace_spec(self, spec: ClusterSpec, actor: str = "fairpod", action: str = "spec.apply") -> None:
        """Take a new (validated) cluster spec: store it (a new version in the history), sync nodes, rebuild
        the engine's view."""
        with self._change():
            active_teams = {j.team for j in self.store.list_jobs(finished=False)}
            gone = sorted(active_teams - {t.name for t in spec.teams})
            if gone:
                raise WrongState(f"team(s) {', '.join(gone)} still have unfinished jobs; "
                                 "cancel them or wait for them to finish first", "team has jobs")
            sync_nodes(self.store, spec, busy={n for r in self.runs.values() for n in r.slots})
            self.store.put_spec(spec, actor=actor, action=action)
            self.spec = spec
            self._rebuild()
        self.wake.set()

    # -- the loop ------------------------------------------------------------------------------
    def reconcile_once(self) -> None:
        with self._turn(), self.store.batch():  # a cycle's job updates and events: one transaction per flush
            self.budgets.apply(self)  # hours used in each budget period (rule 10), before this turn's exits
            membership.sync(self)  # nodes joining and leaving the executor's cluster (Ray); no-op otherwise
            arrays.release(self)  # held tasks of job arrays whose running tasks went below the limit
            backoff.release(self)  # restarts whose backoff ran out
            exits = self.executor.poll(ack=False)
            if exits:  # a node lost with these exits (Ray: its agent died) is a fault before they are taken
                membership.sync(self)
            self._take_exits(exits)
            t0 = time.perf_counter()
            self.snap.now = self.clock()
            decisions = net_changes(schedule(self.snap))  # a job admitted and taken back in one cycle never ran
            self.cycle_seconds = time.perf_counter() - t0
            self.cycles += 1
            # replicas that ended while the engine decided: a job that finished is not preempted
            late = self.executor.poll(ack=False)
            self._take_exits(late)
            self.store.prefetch(d.job for d in decisions)
            for d in decisions:
                if isinstance(d, Preempt):
                    self.preempt(d)
                elif isinstance(d, Shrink):
                    elastic.shrink(self, d)
            for d in decisions:
                if isinstance(d, Admit):
                    self.admit(d)
                elif isinstance(d, Grow):
                    elastic.grow(self, d)
                elif isinstance(d, Wait):
                    self.store.update_job(int(d.job), {"reason": self._wait_reason(d)})
            ready = self._ready()  # slots of the attempts that can start now, stored before they start
            grown = elastic.ready(self)  # and of the new replicas of elastic jobs that grew
            self.store.flush()  # one commit: the exits' effects, the decisions, the slots
            taken = {(e.job, e.attempt, e.rank): e for e in [*exits, *late]}  # late repeats what exits had
            self.executor.ack(list(taken.values()))  # only now: a crash before the commit re-delivers them
            elastic.launch(self, grown)  # new replicas of running attempts: under the lock, as before
            self.usage.tick(self)
            self.retention.tick(self)
            self.watchdog.tick(self)
            self.history.tick(self)
            starts = self._reserve_launches(ready)
        self._launch_unlocked(starts)  # forking takes milliseconds per replica: not under the lock

    def _take_exits(self, exits: list[ReplicaExit]) -> None:
        self.store.prefetch(job_id_of(e.job) for e in exits)  # one query for all the jobs involved
        for e in exits:
            self.exit(e)

    def start(self, interval: float = 0.25) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                self.wake.wait(interval)
                self.wake.clear()
                try:
                    diskfull.recheck(self)
                    self.reconcile_once()
                except Exception as e:  # keep serving; the next turn starts again from the store's truth
                    if not diskfull.failed(self, e):  # a full disk is logged once, and retried every turn
                        log.exception("reconcile failed; rebuilding the control plane's memory from the store")
                    try:
                        self.reload()
                    except Exception as e2:  # noqa: BLE001 - the loop must live on: the next turn tries again
                        if not diskfull.failed(self, e2):
                            log.exception("reload failed; trying again at the next turn")

        self._thread = threading.Thread(target=loop, name="fairpod-reconcile", daemon=True)
        self._thread.start()
        self.eta.start(self)

    def stop(self) -> None:
        self._stop.set()
        self.wake.set()
        self.eta.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self.lock:
            self.history.tick(self, force=True)
        self.executor.close()

    # -- the transitions of a job ----------------------------------------------------------------
    def admit(self, d: Admit) -> None:
        """The engine admitted a pending job: Running on ``d.nodes``; it launches once ``d.after`` stopped."""
        job = self.store.get_job(int(d.job))
        if job is None or job.state != JobState.PENDING:
            return
        run = Run(attempt=job.attempt, after=list(d.after), nodes=list(d.nodes))
        self.runs[job.id] = run
        now = self.clock()
        job = self._save_run(job, run, state=JobState.RUNNING, placement=list(d.nodes), reason=d.reason,
                             nodes=len(d.nodes),  # an elastic job's size now
                             borrowed_from=dict(d.lenders), started_at=now,
                             **({"instance_type": d.itype, "acc": d.req[0], "mcpu": d.req[1], "mib": d.req[2]}
                                if d.itype and d.req else {}),  # a job with fallback types: the one it starts on
                             **({} if job.first_started_at else {"first_started_at": now}))
        self.event("JobAdmitted", f"job {job.name}: {d.reason}", job, nodes=list(d.nodes), after=list(d.after))

    def preempt(self, d: Preempt) -> None:
        """The engine preempts a running job: it stops, then goes back to its queue (``stopped``)."""
        jid = int(d.job)
        job = self.store.get_job(jid)
        run = self.runs.get(jid)
        self._unsnap(jid)  # it goes back to its queue once it has stopped
        if job is None or run is None or job.state != JobState.RUNNING or run.stopping is not None:
            return  # finished meanwhile, or already stopping: no second preemption for one stop
        job = self.store.update_job(job.id, {"preemptions": job.preemptions + 1})
        self.event("JobPreempted", f"job {job.name}: {d.reason}", job, by=d.by, preemption=d.kind)
        self.begin_stop(job, run, STOP_PREEMPT, d.reason)
        if not run.launched:
            self.stopped(self.store.get_job(job.id) or job, run)

    def _ready(self) -> list[tuple[Job, Run]]:
        """Admitted attempts whose victims have stopped and whose accelerator slots are free: their slots are
        taken (and stored with the run) now. An attempt whose slots are still held by a stopping job waits."""
        out = []
        cat = self.spec.catalog()
        for jid, run in list(self.runs.items()):
            if run.launched or run.stopping is not None or any(int(v) in self.runs for v in run.after):
                continue
            job = self.store.get_job(jid)
            if job is None or job.state != JobState.RUNNING:
                continue
            if not run.slots:
                try:
                    run.slots = self.slots.take_all(job.placement, job.acc, cat[job.instance_type].accelerators,
                                                    self._partitions_per_gpu(job.placement[0] if job.placement else ""))
                except SlotsBusy as e:
                    log.debug("job %s waits for accelerator slots: %s", job.name, e)
                    continue
                job = self._save_run(job, run)
            out.append((job, run))
        return out

    def _gpus_are_real(self, node: str) -> bool:
        """Whether a node's accelerators are real GPUs (its instance group says ``accelerators_are: gpus``)."""
        g = self._group_of(node)
        return g is not None and g.accelerators_are == "gpus"

    def _group_of(self, node: str) -> Any:
        """A node's instance group (None: no such node or group), remembered per node name until the snapshot
        is rebuilt (the spec or the nodes changed): one query per node, not one per launch."""
        if node not in self._groups:
            nd = self.store.get_node(node)
            self._groups[node] = next((g for g in self.spec.cluster.instance_groups
                                       if nd is not None and g.name == nd.instance_group), None)
        return self._groups[node]

    def _partitions_per_gpu(self, node: str) -> int:
        """How many accelerator slots of a node are one GPU: its group's MIG partitions per GPU, else 1."""
        from fairpod.model.catalog import MIG_PROFILES

        g = self._group_of(node)
        if g is None or not g.accelerator_partition_type:
            return 1
        kind = self.spec.catalog()[g.instance_type].accelerator_kind or ""
        return MIG_PROFILES[kind][g.accelerator_partition_type]

    def _partition_devices(self, node: str, slots: list[int]) -> tuple[str, ...]:
        """The MIG device UUIDs of a node's partition slots (slot k: GPU k // per GPU, its MIG device k % per GPU),
        from this host's NVML; () when the node's GPUs are not real or not partitioned. Raises ExecutorError when
        a GPU does not have the MIG devices its group's profile says (MIG not configured so)."""
        g = self._group_of(node)
        if g is None or not g.accelerator_partition_type or g.accelerators_are != "gpus":
            return ()
        from fairpod.health.nvml import read_gpus

        per = self._partitions_per_gpu(node)
        gpus, source = read_gpus()
        out = []
        for s in slots:
            gpu, k = divmod(s, per)
            if gpu >= len(gpus) or k >= len(gpus[gpu].mig_devices):
                raise ExecutorError(f"node {node}: GPU {gpu} has no MIG device {k} ({source}); split its GPUs into "
                                    f"{per} x {g.accelerator_partition_type} (nvidia-smi mig -cgi)")
            out.append(gpus[gpu].mig_devices[k])
        return tuple(out)

    def checkpoint_root(self) -> Path:
        """Where jobs' checkpoint directories live: ``cluster.checkpoint_dir``, else ``$FAIRPOD_HOME/checkpoints``."""
        custom = self.spec.cluster.checkpoint_dir
        return Path(custom) if custom else self.home / "checkpoints"

    def _reserve_launches(self, ready: list[tuple[Job, Run]]) -> list[tuple[Job, Run, JobLaunch]]:
        """Under the lock, after the commit that stored their slots: what the executor needs for each attempt
        ``_ready`` chose. Each is marked launched in memory from now on, so a stop that comes while its
        processes start (cancel, preemption, node fault) goes to the executor and waits for the replicas'
        exits instead of freeing the slots at once; :meth:`_launch_unlocked` records the start."""
        starts = []
        for job, run in ready:
            launch = self._launch_of(job, run)
            if launch is not None:
                run.launched = True
                starts.append((job, run, launch))
        return starts

    def _launch_unlocked(self, starts: list[tuple[Job, Run, JobLaunch]]) -> None:
        """Start the reserved attempts without holding the lock (submits and lists go on meanwhile), then,
        under it and in one commit, record each start (``JobStarted``) or failure. A stop asked while they
        started is sent again now that the replicas exist."""
        if not starts:
            return
        done: list[tuple[Job, Run, ExecutorError | None]] = []
        for job, run, launch in starts:
            try:
                self.executor.launch(launch)
                done.append((job, run, None))
            except ExecutorError as e:
                done.append((job, run, e))
            except Exception as e:  # a bug: this attempt fails, the others are still recorded
                log.exception("launch of job %s failed", job.name)
                done.append((job, run, ExecutorError(f"launch failed: {e}")))
        with self._turn(), self.store.batch():
            self.store.prefetch(job.id for job, _, _ in done)  # one query for all of them
            for job, run, err in done:
                cur = self.runs.get(job.id)
                if cur is None or cur.attempt != run.attempt:  # no longer in memory (rebuilt from the store)
                    if err is None:
                        self.executor.stop(job_key(job), run.attempt, 0.0)
                    continue
                job = self.store.get_job(job.id) or job
                if err is not None:
                    self._launch_failed(job, cur, err)
                    continue
                self._started(job, cur)
                if cur.stopping is not None:
                    self.executor.stop(job_key(job), cur.attempt, job.spec.termination_grace_seconds)

    def _launch_of(self, job: Job, run: Run) -> JobLaunch | None:
        """The executor's launch of an admitted attempt on its slots; None (and the job failed) when its
        devices cannot be had."""
        ckpt = self.checkpoint_root() / job.team / job_key(job)
        try:
            devices = {n: self._partition_devices(n, list(run.slots.get(n, []))) for n in job.placement}
        except ExecutorError as e:
            self._launch_failed(job, run, e)
            return
        launch = JobLaunch(
            job=job_key(job), team=job.team, attempt=job.attempt, command=list(job.spec.command),
            checkpoint_dir=str(ckpt),
            env={**job.spec.env, **self.launch_env(job), **elastic.env(job),
                 "FAIRPOD_PREEMPTION_COUNT": str(job.preemptions)},
            workdir=job.spec.workdir, grace_seconds=job.spec.termination_grace_seconds,
            run_as=self.spec.run_as(job.team),
            replicas=tuple(ReplicaLaunch(rank=i, node=n, accelerators=tuple(run.slots.get(n, [])),
                                         real_gpus=self._gpus_are_real(n), devices=devices[n],
                                         mcpu=job.mcpu, mib=job.mib)
                           for i, n in enumerate(job.placement)),
        )  # fmt: skip
        if any(len(r.accelerators) != job.acc for r in launch.replicas):  # never short: _ready took them all
            raise RuntimeError(f"job {job.name}: accelerator slots {run.slots} do not match {job.acc} per node")
        run.after = []
        return launch

    def _launch_failed(self, job: Job, run: Run, e: ExecutorError) -> None:
        run.launched = True
        for rank in range(job.nodes):
            run.exits[str(rank)] = str(e)
            run.codes[str(rank)] = None
        self.begin_stop(job, run, STOP_FAIL, f"could not start: {e}")
        self.stopped(self.store.get_job(job.id) or job, run)

    def _started(self, job: Job, run: Run) -> None:
        """Record that an attempt's replicas exist (also when found live after a crash)."""
        run.launched = True
        job = self._save_run(job, run, started_at=self.clock())
        self.event("JobStarted", f"job {job.name} started (attempt {job.attempt}) on {', '.join(job.placement)}",
                   job, attempt=job.attempt)

    def _isolation_gap(self) -> str | None:
        """Why no node takes a job under ``cluster.isolation: required`` (fairpod.sandbox.capabilities)."""
        return capabilities.required_gap(self.spec.cluster.isolation, self.executor.name)

    def _wait_reason(self, d: Wait) -> str:
        """A job back in its queue after a preemption says so until it runs again."""
        if (gap := self._isolation_gap()) is not None:
            return gap
        job = self.store.get_job(int(d.job))
        info = (job.run_state or {}) if job is not None else {}
        if info.get("stopping") == STOP_PREEMPT and info.get("stop_reason"):
            return f"{d.reason} (requeued: {info['stop_reason']})"
        return d.reason

    def exit(self, e: ReplicaExit) -> None:
        """A replica ended. Taking the same exit twice changes nothing (exits are re-delivered until the store
        has committed them)."""
        jid = job_id_of(e.job)
        run = self.runs.get(jid) if jid is not None else None
        if run is None or jid is None or run.attempt != e.attempt or str(e.rank) in run.exits:
            return
        if elastic.removed(run, e):  # an elastic job shrank: that replica's end ends nothing else
            elastic.replica_gone(self, jid, run, e)
            return
        job = self.store.get_job(jid)
        if job is None:
            return
        if not run.launched:  # started, but the control plane died before it recorded that
            self._started(job, run)
            job = self.store.get_job(jid) or job
        run.exits[str(e.rank)] = e.reason
        run.codes[str(e.rank)] = e.returncode
        if use := run.record_usage(e.rank, e.cpu_seconds, e.memory_peak_bytes):
            self.event("ReplicaUsage", usage_message(job.name, use), job, **use)
        if run.stop_at is not None and e.ended_at < run.stop_at:
            run.before_stop.append(str(e.rank))  # it ended on its own before the stop was asked
        if run.stopping is None:
            if not e.ok:
                self.begin_stop(job, run, failure_kind(job), f"replica {e.rank} {e.reason}")
            elif len(run.exits) == job.nodes:
                self.finish(job, run, JobState.SUCCEEDED, "all replicas exited 0")
                return
        if run.stopping is not None and len(run.exits) >= job.nodes:
            self.stopped(job, run)
        else:
            self._save_run(job, run)

    def begin_stop(self, job: Job, run: Run, kind: str, reason: str) -> None:
        """Ask the executor to stop the attempt; the job's next state waits for every replica's exit."""
        if run.stopping == STOP_CANCEL:
            return
        if run.stopping is None:
            run.stop_at = self.clock()
        run.stopping = kind
        run.stop_reason = reason
        changes: dict[str, Any] = {"reason": reason}
        if kind == STOP_PREEMPT:
            changes["state"] = JobState.PREEMPTED
        self._save_run(job, run, **changes)
        if run.launched:
            self.executor.stop(job_key(job), run.attempt, job.spec.termination_grace_seconds)

    def output_mtime(self, job: Job) -> float | None:
        """When any replica of the job's current attempt last wrote output (None: no log here)."""
        latest = None
        for rank in range(job.nodes):
            path = self.executor.log_path(job_key(job), rank, job.attempt)
            try:
                m = path.stat().st_mtime if path is not None else None
            except OSError:
                m = None
            if m is not None and (latest is None or m > latest):
                latest = m
        return latest

    def gpu_utilization(self, job: Job, run: Run) -> list[float] | None:
        """Utilization (%) of the GPUs the job holds, when they are real GPUs of this host (local executor);
        None otherwise."""
        if self.executor.name != "local" or not run.slots:
            return None
        nodes = [n for n in run.slots if self._gpus_are_real(n)]
        if not nodes:
            return None
        from fairpod.health.nvml import read_gpus

        by_index = {g.index: g for g in read_gpus()[0]}
        held = list({id(g): g for n in nodes for i in run.slots[n]
                     if (g := by_index.get(i // self._partitions_per_gpu(n))) is not None}.values())
        if not held or any(g.utilization_pct is None for g in held):
            return None
        return [float(g.utilization_pct or 0) for g in held]

    def _release(self, job: Job, run: Run) -> None:
        for node, slots in run.slots.items():
            self.slots.give_back(node, slots)
        self.runs.pop(job.id, None)
        self._unsnap(job.id)

    def finish(self, job: Job, run: Run, state: JobState, reason: str) -> None:
        self._release(job, run)
        if state == JobState.SUCCEEDED:
            self.eta.typical.observe(job, self.clock())
        job = self.store.update_job(job.id, {"state": state, "reason": reason, "finished_at": self.clock(),
                                             "run_state": run.to_json()})
        self.event(f"Job{state.value}", f"job {job.name} {state.value.lower()}: {reason}", job)
        self.wake.set()

    def stopped(self, job: Job, run: Run) -> None:
        """Every replica of a stopping attempt has ended: take the job to its next state."""
        kind = run.stopping
        if kind == STOP_PREEMPT and run.before_stop and len(run.exits) >= job.nodes:
            # replicas that had ended on their own before the preemption reached them decide
            natural = {r: run.codes.get(r) for r in run.before_stop}
            if len(natural) == job.nodes and all(c == 0 for c in natural.values()):
                self.finish(job, run, JobState.SUCCEEDED, "all replicas exited 0")
                return
            failed = sorted(r for r, c in natural.items() if c != 0)
            if failed:
                kind = run.stopping = failure_kind(job)
                run.stop_reason = f"replica {failed[0]} {run.exits[failed[0]]}"
        if kind == STOP_CANCEL:
            self.finish(job, run, JobState.CANCELLED, run.stop_reason)
        elif kind == STOP_FAIL:
            self.finish(job, run, JobState.FAILED, run.stop_reason)
        elif kind in (STOP_PREEMPT, STOP_RESTART):
            self._release(job, run)
            now = self.clock()
            changes: dict[str, Any] = {"state": JobState.PENDING, "enqueued_at": now, "run_state": run.to_json(),
                                       "placement": [], "borrowed_from": {}, "nodes": job.spec.nodes}
            if kind == STOP_RESTART:
                changes["attempt"] = job.attempt + 1
                changes["reason"] = f"restarting: {run.stop_reason}"
                changes.update(backoff.restart_changes(self.spec.policy, job, changes["run_state"], run.stop_reason,
                                                       now))
            job = self.store.update_job(job.id, changes)
            if kind == STOP_RESTART:
                self.event("JobRestarting", f"job {job.name}: {run.stop_reason} (restart {job.attempt} of "
                           f"{job.max_retry})", job, attempt=job.attempt)
            else:
                self.event("JobRequeued", f"job {job.name} stopped and is back in its queue", job)
            if not backoff.hold(self, job):
                self.snap.add_pending(self.workload(job))
            self.wake.set()

    # -- the transitions of a node -----------------------------------------------------------------
    def add_node(self, name: str, group: str, itype: str, **fields: Any) -> None:
        """A node joined (e.g. a Ray node): store it and let the engine use it."""
        self._groups.clear()
        with self._change():
            cat = self.spec.catalog()
            if itype not in cat:
                raise ValueError(f"node {name}: unknown instance type {itype!r}")
            node = self.store.get_node(name)
            if node is None:
                node = self.store.add_node(name, group, itype, **fields)
                self.event("NodeJoined", f"node {name} ({itype}) joined", node=name)
            if name not in self.snap.nodes:
                self.snap.add_node(name, itype, node_res(cat[itype]), schedulable=node.schedulable,
                                   passed=node.deep_health_check == DeepHealthCheck.PASSED,
                                   topology=self.spec.node_topology(node.instance_group, name, node.labels))
        self.wake.set()

    def update_node(self, name: str, changes: dict[str, Any]) -> Node:
        """Change a node's stored fields (cordon, health status, deep health check, labels) and the engine's
        view of it (schedulable, passed) together."""
        self._groups.clear()
        with self._change():
            node = self.store.update_node(name, changes)
            snode = self.snap.nodes.get(name)
            if snode is not None:
                labels = "labels" in changes and self.snap.levels  # a Ray node's topology labels may have changed
                self.snap.update_node(name, passed=node.deep_health_check == DeepHealthCheck.PASSED,
                                      topology=self.spec.node_topology(node.instance_group, name, node.labels)
                                      if labels else None)
                if snode.schedulable != node.schedulable:
                    self.snap.set_schedulable(name, node.schedulable and not self._isolation_gap())
        self.wake.set()
        return node

    def set_schedulable(self, node: str, schedulable: bool) -> None:
        """Take a node out of the engine's placements (or back) without changing the store (a deep health
        check under way)."""
        with self.lock:
            if node in self.snap.nodes:
                self.snap.set_schedulable(node, schedulable and not self._isolation_gap())
        self.wake.set()

    def forget_node(self, name: str) -> None:
        """Delete a node that runs nothing from the store and the engine's view."""
        self._groups.clear()
        with self._change():
            self.store.delete_node(name)
            if name in self.snap.nodes:
                self.snap.remove_node(name)

    def remove_node(self, name: str, reason: str) -> None:
        """A node left for good: its jobs are handled as after a fault, then it is forgotten."""
        self._groups.clear()
        with self._change():
            self.node_fault(name, "NodeLost", reason, "none")
            self.event("NodeLeft", f"node {name} left: {reason}", node=name)
        self.wake.set()

    def node_fault(self, name: str, fault_type: str, reason: str, action: str) -> list[int]:
        """Take ``name`` out of service and stop its jobs; returns the ids of the jobs stopped. Those with
        auto-resume restart on healthy nodes (counting a retry), the others fail with the fault as reason."""
        stopped: list[int] = []
        with self._change():
            node = self.store.get_node(name)
            if node is None:
                return stopped
            self.update_node(name, {"health_status": ACTION_STATUS.get(action, NodeHealth.UNSCHEDULABLE),
                                    "fault_type": fault_type, "fault_reason": reason, "last_check_at": self.clock()})
            self.event("NodeFault", f"node {name}: {fault_type}: {reason} (action: {action})", node=name,
                       fault_type=fault_type, action=action)
            why = f"node {name} fault: {fault_type}: {reason}"
            for jid, run in list(self.runs.items()):
                job = self.store.get_job(jid)
                if job is None or name not in job.placement or run.stopping is not None:
                    continue
                self.begin_stop(job, run, failure_kind(job), why)
                stopped.append(jid)
                if not run.launched:
                    self.stopped(self.store.get_job(jid) or job, run)
        self.wake.set()
        return stopped

    def node_recovered(self, name: str, passed: bool = True) -> None:
        """The node is healthy again (after a reboot, a replacement or by hand)."""
        with self._change():
            self.update_node(name, {
                "health_status": NodeHealth.SCHEDULABLE, "fault_type": None, "fault_reason": None,
                "deep_health_check": DeepHealthCheck.PASSED if passed else DeepHealthCheck.FAILED,
                "last_check_at": self.clock()})
            self.event("NodeRecovered", f"node {name} is back in service", node=name)
        self.wake.set()

    def jobs_on(self, name: str) -> list[int]:
        """Jobs with an attempt placed on ``name`` (starting, running or stopping)."""
        with self.lock:
            return [jid for jid, run in self.runs.items() if name in run.nodes or name in run.slots]
