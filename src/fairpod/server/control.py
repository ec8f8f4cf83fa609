"""The control plane's core: one object that owns the store, the executor and the engine's snapshot.

Every change goes through a ``ControlPlane`` method under one lock: the store is written first (it is the
truth and survives a crash), then the in-memory engine snapshot, which is rebuilt from the store at start-up
and after spec changes. ``reconcile_once`` is one turn of the loop: collect replica exits, run one engine
cycle, apply its decisions, launch admitted jobs whose victims have stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fairpod.executors.base import Executor, ExecutorError, JobLaunch, ReplicaExit, ReplicaLaunch
from fairpod.governance import Admit, Preempt, Wait, Workload, schedule
from fairpod.governance.build import empty_snapshot, engine_team
from fairpod.model.jobs import JobSpec, JobState, resolve_job
from fairpod.model.resources import Res, node_res
from fairpod.model.spec import ClusterSpec
from fairpod.server import arrays, membership
from fairpod.server.batch import BatchingStore
from fairpod.server.nodes import NodeOps
from fairpod.server.runs import STOP_CANCEL, STOP_FAIL, STOP_PREEMPT, STOP_RESTART, Run, Slots
from fairpod.server.usage import UsageSampler
from fairpod.store import AlreadyExists, Store
from fairpod.store.records import DeepHealthCheck, Job

log = logging.getLogger("fairpod.control")


class Problem(Exception):
    """An error for the API caller: HTTP status and a message a person can act on."""

    def __init__(self, status: int, title: str, detail: str):
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail


def job_key(job: Job) -> str:
    """The executor's name for a job: unique, readable, safe as a directory name."""
    return f"{job.name}-{job.id}"


def job_id_of(key: str) -> int | None:
    try:
        return int(key.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return None


class ControlPlane(NodeOps):
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
        self.wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs: dict[int, Run] = {}
        self.slots = Slots()
        rec = store.get_spec()
        if rec is None:
            raise RuntimeError("the store holds no cluster spec; apply one first")
        self.spec: ClusterSpec = rec.spec
        self.cycles = 0
        self.cycle_seconds = 0.0
        self.usage = UsageSampler()  # usage history and cycle timings for the dashboard and /metrics
        self.health: Any = None  # fairpod.health.manager.HealthManager, when node health runs
        # extra env of every launch (API URL, job token: fairpod.server.jobtoken.launch_env)
        self.launch_env: Callable[[Job], dict[str, str]] = lambda job: {}
        with self.lock:
            self._recover()

    # -- snapshot ------------------------------------------------------------------------------
    def _workload(self, job: Job) -> Workload:
        return Workload(
            str(job.id), job.team, job.instance_type, job.nodes, Res(job.acc, job.mcpu, job.mib),
            priority=job.priority, submit=job.submit_time, seq=job.seq, enqueued=job.enqueued_at,
            min_runtime=min(job.spec.min_runtime_seconds, self.spec.policy.max_min_runtime_seconds),
            passed_only=job.spec.deep_health_check_passed_nodes_only,
            checkpoint=job.checkpoint_at, reason=job.reason,
        )  # fmt: skip

    def _rebuild(self) -> None:
        snap = empty_snapshot(self.spec, self.clock())
        cat = self.spec.catalog()
        for nd in self.store.list_nodes():
            if nd.instance_type not in cat:
                continue
            snap.add_node(nd.name, nd.instance_type, node_res(cat[nd.instance_type]), schedulable=nd.schedulable,
                          passed=nd.deep_health_check == DeepHealthCheck.PASSED)
        for t in self.spec.teams:
            snap.add_team(engine_team(self.spec, t.name))
        unfinished = self.store.list_jobs(finished=False)
        for job in unfinished:
            if job.team not in snap.teams:
                continue
            w = self._workload(job)
            if job.state == JobState.RUNNING:
                snap.assign(w, [n for n in job.placement if n in snap.nodes])
                w.started = job.started_at
            elif job.state == JobState.PENDING:
                snap.add_pending(w)
        self.snap = snap
        arrays.hold_back(self, unfinished)  # throttled job arrays: tasks beyond their limit wait outside

    def _recover(self) -> None:
        """Start-up: re-adopt live replicas, take in exits recorded while we were down, rebuild the snapshot."""
        exits = self.executor.adopt()
        live = self.executor.running()
        for job in self.store.list_jobs(state=[JobState.RUNNING, JobState.PREEMPTED]):
            run = Run.from_json(job.exit_info, job.attempt)
            if live.get(job_key(job)) == job.attempt:
                run.launched = True
            self.runs[job.id] = run
            for node, slots in run.slots.items():
                self.slots.mark(node, slots)
        self._rebuild()
        for e in exits:
            self._on_exit(e)
        # replicas that ended unseen (their exit was taken but not recorded before a crash)
        for jid, run in list(self.runs.items()):
            job = self.store.get_job(jid)
            if job is None or not run.launched or live.get(job_key(job)) == run.attempt:
                continue
            for rank in range(job.nodes):
                run.exits.setdefault(str(rank), "ended while the control plane was down")
                run.codes.setdefault(str(rank), None)
            if run.stopping is None:
                ok = all(c == 0 for c in run.codes.values())
                if ok:
                    self._finish(job, run, JobState.SUCCEEDED, "all replicas exited 0")
                    continue
                self._begin_stop(job, run, self._failure_kind(job), "replicas ended while the control plane was down")
            self._stopped(job, run)
        for jid, run in list(self.runs.items()):
            job = self.store.get_job(jid)
            if job is not None and job.state == JobState.PREEMPTED and not run.launched:
                self._stopped(job, run)

    # -- events and store helpers --------------------------------------------------------------
    def event(self, kind: str, msg: str, job: Job | None = None, /, **data: Any) -> None:
        self.store.append_event(kind, msg, job_id=job.id if job else None, team=job.team if job else None,
                                node=data.pop("node", None), data=data)

    def _save_run(self, job: Job, run: Run, **changes: Any) -> Job:
        return self.store.update_job(job.id, {"exit_info": run.to_json(), **changes})

    # -- user actions --------------------------------------------------------------------------
    def submit(self, spec: JobSpec, actor: str, key: str | None = None) -> Job:
        """Queue a job. With an idempotency ``key`` a repeated submit by the same ``actor`` returns the job the
        first one created (whatever its state now) instead of a second job."""
        with self.lock:
            if key is not None and (jid := self.store.submitted_with(actor, key)) is not None:
                earlier = self.store.get_job(jid)
                if earlier is not None:
                    return earlier
            try:
                resolved = resolve_job(spec, self.spec)
            except ValueError as e:
                raise Problem(400, "invalid job", str(e)) from None
            if spec.command == []:
                raise Problem(400, "invalid job", "the job has no command: give one after --")
            w_total = Res(*resolved.per_replica)
            never = self._never_fits(resolved.instance_type, spec.nodes, w_total)
            if never:
                raise Problem(400, "job can never run", never)
            try:
                with self.store.tx() as t:  # the job, its event and the audit entry: one transaction
                    job = t.insert_job(spec, resolved, reason="queued")
                    t.append_events([{"kind": "JobSubmitted", "message": f"job {spec.name} submitted by {actor}",
                                      "job_id": job.id, "team": job.team, "data": {"actor": actor}}])
                    t.append_audit(actor, "job.submit", f"{job.team}/{job.name}", {"id": job.id})
                    if key is not None:
                        t.remember_submit(actor, key, job.id)
            except AlreadyExists as e:
                raise Problem(409, "job exists", str(e)) from None
            self.snap.add_pending(self._workload(job))
        self.wake.set()
        return job

    def _never_fits(self, itype: str, n: int, per: Res) -> str | None:
        nodes = self.snap.by_type.get(itype, [])
        if not nodes and itype not in {q for t in self.spec.teams for q in self.spec.team_quota(t)}:
            have = ", ".join(sorted(self.snap.by_type)) or "none"
            return f"the cluster has no {itype} nodes (it has: {have})"
        if nodes and len(nodes) < n:
            return f"the job asks for {n} {itype} nodes; the cluster has {len(nodes)}"
        return None

    def cancel(self, job: Job, actor: str) -> Job:
        with self.lock:
            job = self.store.get_job(job.id) or job
            if job.state.finished:
                raise Problem(409, "job finished", f"job {job.name} is already {job.state.value}")
            if job.state == JobState.PENDING:
                self.snap.remove_pending(str(job.id))
                job = self.store.update_job(job.id, {"state": JobState.CANCELLED, "reason": f"cancelled by {actor}",
                                                     "finished_at": self.clock()})
                self.event("JobCancelled", f"job {job.name} cancelled by {actor}", job)
            else:
                run = self.runs.setdefault(job.id, Run(attempt=job.attempt))
                if run.stopping == STOP_PREEMPT or run.stopping is None:
                    self._begin_stop(job, run, STOP_CANCEL, f"cancelled by {actor}")
                    if job.state == JobState.RUNNING:
                        self.event("JobCancelling", f"job {job.name} is stopping: cancelled by {actor}", job)
                job = self.store.get_job(job.id) or job
                if not run.launched:
                    self._stopped(job, run)
                    job = self.store.get_job(job.id) or job
            self.store.append_audit(actor, "job.cancel", f"{job.team}/{job.name}", {"id": job.id})
        self.wake.set()
        return job

    def report_progress(self, job: Job, step: int | None, checkpoint: str | None) -> Job:
        with self.lock:
            now = self.clock()
            changes: dict[str, Any] = {"checkpoint_step": step}
            if checkpoint:
                changes.update(checkpoint_at=now, checkpoint_path=checkpoint)
                w = self.snap.running.get(str(job.id))
                if w is not None:
                    w.checkpoint = now
            return self.store.update_job(job.id, changes)

    def set_schedulable(self, node: str, schedulable: bool) -> None:
        with self.lock:
            if node in self.snap.nodes:
                self.snap.set_schedulable(node, schedulable)
        self.wake.set()

    def replace_spec(self, spec: ClusterSpec) -> None:
        """Take a new (validated) cluster spec: store it, sync nodes, rebuild the engine's view."""
        with self.lock:
            active_teams = {j.team for j in self.store.list_jobs(finished=False)}
            gone = sorted(active_teams - {t.name for t in spec.teams})
            if gone:
                raise Problem(409, "team has jobs", f"team(s) {', '.join(gone)} still have unfinished jobs; "
                              "cancel them or wait for them to finish first")
            sync_nodes(self.store, spec, busy={n for r in self.runs.values() for n in r.slots})
            self.store.put_spec(spec)
            self.spec = spec
            self._rebuild()
        self.wake.set()

    # -- the loop ------------------------------------------------------------------------------
    def reconcile_once(self) -> None:
        with self.lock, self.store.batch():  # a cycle's job updates and events: one transaction per flush
            membership.sync(self)  # nodes joining and leaving the executor's cluster (Ray); no-op otherwise
            arrays.release(self)  # held tasks of job arrays whose running tasks went below the limit
            exits = self.executor.poll()
            self.store.prefetch(job_id_of(e.job) for e in exits)  # one query for all the jobs involved
            for e in exits:
                self._on_exit(e)
            t0 = time.perf_counter()
            self.snap.now = self.clock()
            decisions = schedule(self.snap)
            self.cycle_seconds = time.perf_counter() - t0
            self.cycles += 1
            self.store.prefetch(d.job for d in decisions)
            # A job may be admitted and preempted within one cycle: apply only the net change. A Preempt
            # counts if it is the job's first decision (it ran before the cycle), an Admit if it is the
            # job's last and the job was pending before the cycle.
            first: dict[str, Admit | Preempt] = {}
            last: dict[str, Admit | Preempt] = {}
            for d in decisions:
                if isinstance(d, Admit | Preempt):
                    first.setdefault(d.job, d)
                    last[d.job] = d
            for d in decisions:
                if isinstance(d, Preempt) and first[d.job] is d:
                    self._on_preempt(d)
            for d in decisions:
                if isinstance(d, Admit):
                    if last[d.job] is d and isinstance(first[d.job], Admit):
                        self._on_admit(d)
                elif isinstance(d, Wait):
                    self.store.update_job(int(d.job), {"reason": self._wait_reason(d)})
            self.store.flush()  # the store knows every admission before its processes start
            self._launch_ready()
            self.usage.tick(self)

    def start(self, interval: float = 0.25) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                self.wake.wait(interval)
                self.wake.clear()
                try:
                    self.reconcile_once()
                except Exception:  # keep serving; the next turn starts again from the store's truth
                    log.exception("reconcile failed; rebuilding the engine's view from the store")
                    with self.lock:
                        self._rebuild()

        self._thread = threading.Thread(target=loop, name="fairpod-reconcile", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.executor.close()

    # -- applying decisions --------------------------------------------------------------------
    def _on_admit(self, d: Admit) -> None:
        job = self.store.get_job(int(d.job))
        if job is None:
            return
        run = Run(attempt=job.attempt, after=list(d.after))
        cat = self.spec.catalog()
        size = cat[job.instance_type].accelerators
        for node in d.nodes:
            run.slots[node] = self.slots.take(node, job.acc, size)
        self.runs[job.id] = run
        now = self.clock()
        job = self._save_run(job, run, state=JobState.RUNNING, placement=list(d.nodes), reason=d.reason,
                             borrowed_from=dict(d.lenders), started_at=now,
                             **({} if job.first_started_at else {"first_started_at": now}))
        self.event("JobAdmitted", f"job {job.name}: {d.reason}", job, nodes=list(d.nodes), after=list(d.after))

    def _on_preempt(self, d: Preempt) -> None:
        job = self.store.get_job(int(d.job))
        if job is None:
            return
        self.snap.remove_pending(d.job)  # it goes back to its queue once it has stopped
        run = self.runs.setdefault(job.id, Run(attempt=job.attempt))
        job = self.store.update_job(job.id, {"preemptions": job.preemptions + 1})
        self.event("JobPreempted", f"job {job.name}: {d.reason}", job, by=d.by, preemption=d.kind)
        self._begin_stop(job, run, STOP_PREEMPT, d.reason)
        if not run.launched:
            self._stopped(self.store.get_job(job.id) or job, run)

    def _launch_ready(self) -> None:
        for jid, run in list(self.runs.items()):
            if run.launched or run.stopping is not None:
                continue
            if any(int(v) in self.runs for v in run.after):
                continue
            job = self.store.get_job(jid)
            if job is None or job.state != JobState.RUNNING:
                continue
            self._launch(job, run)

    def _gpus_are_real(self, node: str) -> bool:
        """Whether a node's accelerators are real GPUs (its instance group says ``accelerators_are: gpus``)."""
        nd = self.store.get_node(node)
        return nd is not None and self.spec.gpus_are_real(nd.instance_group)

    def _launch(self, job: Job, run: Run) -> None:
        ckpt = self.home / "checkpoints" / job.team / f"{job.name}-{job.id}"
        launch = JobLaunch(
            job=job_key(job), team=job.team, attempt=job.attempt, command=list(job.spec.command),
            checkpoint_dir=str(ckpt),
            env={**job.spec.env, **self.launch_env(job), "FAIRPOD_PREEMPTION_COUNT": str(job.preemptions)},
            workdir=job.spec.workdir, grace_seconds=job.spec.termination_grace_seconds,
            run_as=self.spec.run_as(job.team),
            replicas=tuple(ReplicaLaunch(rank=i, node=n, accelerators=tuple(run.slots.get(n, [])),
                                         real_gpus=self._gpus_are_real(n)) for i, n in enumerate(job.placement)),
        )  # fmt: skip
        run.after = []
        try:
            self.executor.launch(launch)
        except ExecutorError as e:
            run.launched = True
            for rank in range(job.nodes):
                run.exits[str(rank)] = str(e)
                run.codes[str(rank)] = None
            self._begin_stop(job, run, STOP_FAIL, f"could not start: {e}")
            self._stopped(self.store.get_job(job.id) or job, run)
            return
        run.launched = True
        now = self.clock()
        job = self._save_run(job, run, started_at=now)
        self.event("JobStarted", f"job {job.name} started (attempt {job.attempt}) on {', '.join(job.placement)}",
                   job, attempt=job.attempt)

    # -- replica exits and stopping ------------------------------------------------------------
    def _wait_reason(self, d: Wait) -> str:
        """A job back in its queue after a preemption says so until it runs again."""
        job = self.store.get_job(int(d.job))
        info = (job.exit_info or {}) if job is not None else {}
        if info.get("stopping") == STOP_PREEMPT and info.get("stop_reason"):
            return f"{d.reason} (requeued: {info['stop_reason']})"
        return d.reason

    def _failure_kind(self, job: Job) -> str:
        return STOP_RESTART if job.auto_resume and job.attempt < job.max_retry else STOP_FAIL

    def _on_exit(self, e: ReplicaExit) -> None:
        jid = job_id_of(e.job)
        run = self.runs.get(jid) if jid is not None else None
        if run is None or run.attempt != e.attempt or jid is None:
            return
        job = self.store.get_job(jid)
        if job is None:
            return
        run.exits[str(e.rank)] = e.reason
        run.codes[str(e.rank)] = e.returncode
        if run.stopping is None:
            if not e.ok:
                kind = self._failure_kind(job)
                self._begin_stop(job, run, kind, f"replica {e.rank} {e.reason}")
            elif len(run.exits) == job.nodes:
                self._finish(job, run, JobState.SUCCEEDED, "all replicas exited 0")
                return
        if run.stopping is not None and len(run.exits) >= job.nodes:
            self._stopped(job, run)
        else:
            self._save_run(job, run)

    def _begin_stop(self, job: Job, run: Run, kind: str, reason: str) -> None:
        if run.stopping == STOP_CANCEL:
            return
        run.stopping = kind
        run.stop_reason = reason
        changes: dict[str, Any] = {"reason": reason}
        if kind == STOP_PREEMPT:
            changes["state"] = JobState.PREEMPTED
        self._save_run(job, run, **changes)
        if run.launched:
            self.executor.stop(job_key(job), run.attempt, job.spec.termination_grace_seconds)

    def _release(self, job: Job, run: Run) -> None:
        for node, slots in run.slots.items():
            self.slots.give_back(node, slots)
        self.runs.pop(job.id, None)
        if str(job.id) in self.snap.running:
            self.snap.finish(str(job.id))

    def _finish(self, job: Job, run: Run, state: JobState, reason: str) -> None:
        self._release(job, run)
        job = self.store.update_job(job.id, {"state": state, "reason": reason, "finished_at": self.clock(),
                                             "exit_info": run.to_json()})
        self.event(f"Job{state.value}", f"job {job.name} {state.value.lower()}: {reason}", job)
        self.wake.set()

    def _stopped(self, job: Job, run: Run) -> None:
        """Every replica of a stopping attempt has ended: take the job to its next state."""
        kind = run.stopping
        if kind == STOP_CANCEL:
            self._finish(job, run, JobState.CANCELLED, run.stop_reason)
        elif kind == STOP_FAIL:
            self._finish(job, run, JobState.FAILED, run.stop_reason)
        elif kind in (STOP_PREEMPT, STOP_RESTART):
            self._release(job, run)
            now = self.clock()
            changes: dict[str, Any] = {"state": JobState.PENDING, "enqueued_at": now, "exit_info": run.to_json(),
                                       "placement": [], "borrowed_from": {}}
            if kind == STOP_RESTART:
                changes["attempt"] = job.attempt + 1
                changes["reason"] = f"restarting: {run.stop_reason}"
            job = self.store.update_job(job.id, changes)
            if kind == STOP_RESTART:
                self.event("JobRestarting", f"job {job.name}: {run.stop_reason} (restart {job.attempt} of "
                           f"{job.max_retry})", job, attempt=job.attempt)
            else:
                self.event("JobRequeued", f"job {job.name} stopped and is back in its queue", job)
            self.snap.remove_pending(str(job.id))
            self.snap.add_pending(self._workload(job))
            self.wake.set()


def sync_nodes(store: Store, spec: ClusterSpec, busy: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Make the store's nodes match the spec's instance groups (``<group>-<i>``); busy nodes are kept.
    With the Ray executor the nodes come from the Ray cluster (``fairpod.server.membership``), not the spec."""
    want: dict[str, tuple[str, str]] = {}
    for g in spec.cluster.instance_groups if spec.cluster.executor.kind != "ray" else []:
        for i in range(g.count):
            want[f"{g.name}-{i}"] = (g.name, g.instance_type)
    have = {n.name: n for n in store.list_nodes()}
    for name, (group, itype) in want.items():
        if name not in have:
            store.add_node(name, group, itype)
        elif have[name].instance_type != itype:
            if name in busy:
                raise Problem(409, "node busy", f"node {name} runs jobs; it cannot change instance type now")
            store.delete_node(name)
            store.add_node(name, group, itype)
    for name in have:
        if name not in want and name not in busy and membership.NODE_ID not in have[name].labels:
            store.delete_node(name)
