"""The plane: the one lock, start-up recovery, reload after a failed store write, and the public API the routes
and the parts of the server call (:class:`fairpod.server.core.api.Core`). The transitions themselves are in the
sibling modules; :class:`ControlPlane` is their sum."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.exc import SQLAlchemyError

from fairpod.executors.base import Executor, JobLaunch, Resizing, capability
from fairpod.governance.snapshot import Snapshot
from fairpod.model.cluster import InstanceGroup
from fairpod.model.jobs import JobSpec, JobState
from fairpod.model.keys import job_id_of, run_key
from fairpod.model.nodes import NodeHealth
from fairpod.model.spec import ClusterSpec
from fairpod.server.core.api import Core
from fairpod.server.core.batch import BatchingStore
from fairpod.server.core.door import Door
from fairpod.server.core.history import HistoryKeeper
from fairpod.server.core.loop import Beside, Keepers, Loop, standard_keepers
from fairpod.server.core.memory import Memory
from fairpod.server.core.published import Published
from fairpod.server.core.queries import Queries
from fairpod.server.core.submits import SubmitQueue
from fairpod.server.core.transitions import (
    array_holds,
    launch,
    nodes,
    priority,
    readiness,
    relocation,
    resize,
    restarts,
    stop,
    submit,
)
from fairpod.server.core.transitions.budgets import BudgetKeeper
from fairpod.server.core.transitions.logrules import LogWatch
from fairpod.server.core.transitions.watchdog import Watchdog
from fairpod.server.core.turn_gate import TurnGate
from fairpod.server.core.turns import TurnHistogram, TurnPace
from fairpod.server.errors import WrongState
from fairpod.server.keepers import outage
from fairpod.server.nodes import sync_nodes
from fairpod.server.runs import (
    STOP_CANCEL,
    STOP_DONE,
    Run,
    Slots,
    failure_kind,
    job_key,
    to_engine,
)
from fairpod.store import Store, StoreError
from fairpod.store.records import Job, Node

log = logging.getLogger("fairpod.control")

STORE_ERRORS = (StoreError, SQLAlchemyError)


T = TypeVar("T")


class ControlPlane(Memory, Loop, Door, Core):
    """The control plane's core (see :mod:`fairpod.server.core` for its transitions)."""

    snap: Snapshot  # the engine's, built by Memory._rebuild (at start-up, after a spec change, on reload)
    engine_memory = True  # (an API worker's core has none: fairpod.server.core.worker)

    def __init__(
        self,
        store: Store,
        executor: Executor,
        home: Path,
        *,
        beside: Beside,
        clock: Callable[[], float] = time.time,
        keepers: Callable[[ControlPlane], Keepers] = standard_keepers,
    ) -> None:
        self.store = BatchingStore(store)  # batches the reconcile loop's job writes (fairpod.server.core.batch)
        self.store.quiet = self.database_lost  # a lost database is said once (fairpod.server.keepers.outage)
        self.queries = Queries(self.store)  # what every other module reads of the store (core.queries)
        self.executor = executor
        self.home = Path(home)
        self.clock = clock
        self.lock = threading.RLock()
        self.gate = TurnGate()  # the reconcile turn takes the lock ahead of waiting submits
        self.submits = SubmitQueue()  # submits waiting for the lock: written together (server.core.submits)
        self.wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs: dict[int, Run] = {}
        self.slots = Slots()
        self.eta = beside.eta  # estimated start times of pending jobs (its own thread, started by start())
        rec = store.get_spec()
        if rec is None:
            raise RuntimeError("the store holds no cluster spec; apply one first")
        self.spec: ClusterSpec = rec.spec
        self.cycles = 0
        self.cycle_seconds = 0.0
        self.published = Published()  # what reads answer with while a turn holds the lock (core.published)
        self.facts_seconds = 0.0  # the CPU the last publish_facts took (core.facts; benchmarks/turn_cost.py)
        self.turns = TurnHistogram()  # whole reconcile turns, for /metrics
        self.pace = TurnPace()  # how soon a woken turn may follow the last one (coalesces bursts of wakes)
        self.usage = beside.usage  # usage history and cycle timings for the dashboard and /metrics
        self.retention = beside.retention  # deletes what policy.retention_days no longer keeps
        self.watchdog = Watchdog()  # runtime limits and hang detection
        self.logwatch = LogWatch()  # log rules: the replicas' output matched in a thread of its own
        self.history = HistoryKeeper()  # FairShareHistory kept across restarts
        self.budgets = BudgetKeeper()  # teams' accelerator-hours in the current budget periods
        self.health: Any = None  # fairpod.health.manager.HealthManager, when node health runs
        self.output_sizes: dict[int, tuple[int, dict[int, int], float]] = {}  # job -> (attempt, log sizes, written)
        self.services: Any = None  # fairpod.server.core.transitions.services.Services: readiness, endpoints, drain (runtime.build)
        self.array_holds: dict[int, array_holds.Hold] = {}  # throttled job arrays: their tasks kept out of the engine
        self.restart_holds: dict[int, float] = {}  # restarts backing off (fairpod.server.core.transitions.backoff)
        self._groups: dict[str, InstanceGroup | None] = {}  # node -> its instance group or None (cleared when rebuilt)
        # extra env of every launch (API URL, job token: fairpod.server.access.jobtoken.launch_env)
        self.launch_env: Callable[[Job], dict[str, str]] = lambda job: {}
        self.keepers = keepers(self)  # what runs beside the engine at every turn (loop.standard_keepers)
        with self.lock:
            self._recover()

    def submit(self, spec: JobSpec, actor: str, key: str | None = None) -> Job:
        """Queue a job (:func:`fairpod.server.core.transitions.submit.submit`)."""
        return submit.submit(self, spec, actor, key)

    def submit_keyed(self, spec: JobSpec, actor: str, key: str | None = None) -> tuple[Job, bool]:
        """:meth:`submit`, and whether this request created the job (not an earlier one with ``key``)."""
        return submit.submit_keyed(self, spec, actor, key)

    async def submit_answered(self, spec: JobSpec, actor: str, key: str | None,
                              answer: Callable[[Job], T]) -> tuple[Job, bool, T]:
        """:meth:`submit_keyed` and ``answer(job)``, awaited (:func:`~.transitions.submit.submit_answered`)."""
        return await submit.submit_answered(self, spec, actor, key, answer)

    def submit_array(self, spec: JobSpec, text: str, actor: str,
                     key: str | None = None) -> tuple[list[Job], bool]:
        """Queue the tasks of a job array (:func:`fairpod.server.core.transitions.submit.submit_array`)."""
        return submit.submit_array(self, spec, text, actor, key)

    # -- the node transitions' commands (fairpod.server.core.transitions.nodes) ---------------------------------
    def add_node(self, name: str, group: str, itype: str, **fields: Any) -> None:
        nodes.add_node(self, name, group, itype, **fields)

    def cordon(self, name: str, cordoned: bool = True) -> Node:
        return nodes.cordon(self, name, cordoned)

    def quarantine(self, name: str, fault_type: str, reason: str) -> Node:
        return nodes.quarantine(self, name, fault_type, reason)

    def release(self, name: str) -> Node:
        return nodes.release(self, name)

    def set_labels(self, name: str, labels: dict[str, Any]) -> Node:
        return nodes.set_labels(self, name, labels)

    def check_started(self, name: str) -> None:
        nodes.check_started(self, name)

    def check_passed(self, name: str, status: NodeHealth | None = None) -> None:
        nodes.check_passed(self, name, status)

    def check_failed(self, name: str, fault_type: str, reason: str, action: str) -> list[int]:
        return nodes.check_failed(self, name, fault_type, reason, action)

    def check_reset(self, name: str) -> Node:
        return nodes.check_reset(self, name)

    def recovery_requested(self, name: str, action: str, status: NodeHealth) -> list[int]:
        return nodes.recovery_requested(self, name, action, status)

    def restarted(self, name: str, labels: dict[str, Any]) -> Node:
        return nodes.restarted(self, name, labels)

    def set_schedulable(self, node: str, schedulable: bool) -> None:
        nodes.set_schedulable(self, node, schedulable)

    def forget_node(self, name: str) -> None:
        nodes.forget_node(self, name)

    def remove_node(self, name: str, reason: str) -> None:
        nodes.remove_node(self, name, reason)

    def node_fault(self, name: str, fault_type: str, reason: str, action: str) -> list[int]:
        return nodes.node_fault(self, name, fault_type, reason, action)

    def node_recovered(self, name: str, passed: bool = True) -> None:
        nodes.node_recovered(self, name, passed)

    # -- what readiness, restarts and resize call back through the state (transitions.stop and .launch import them)
    def begin_stop(self, job: Job, run: Run, kind: str, reason: str) -> None:
        stop.begin_stop(self, job, run, kind, reason)

    def build_launch(self, job: Job, run: Run, ranks: list[int] | None = None) -> JobLaunch:
        return launch.build_launch(self, job, run, ranks)

    def reload(self) -> None:
        """Forget the memory and build it again from the store (after a failed store write)."""
        with self.lock:
            unfinished = self.store.engine_jobs()
            self._load_runs(unfinished)
            self._rebuild(unfinished)

    @contextmanager
    def _change(self) -> Iterator[None]:
        """One transition: under the lock; if the store refuses a write, the memory goes back to the store's."""
        with self.lock:
            try:
                yield
            except STORE_ERRORS as e:
                if outage.failed(self, e):  # said once; the loop rebuilds the memory once the store answers
                    raise
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
        """Start-up: re-adopt live replicas, take in exits not acknowledged, rebuild the snapshot. The unfinished
        jobs are read once, as the memory needs them (``Store.engine_jobs``: no job's whole spec); each pass
        below reads whole, in one query, only the jobs it acts on."""
        exits = self.executor.adopt(ack=False)
        live = self.executor.running()
        unfinished = self.store.engine_jobs()  # read once: 100,000 jobs take seconds
        unrecorded = self._load_runs(unfinished)
        self._rebuild(unfinished)
        keys: dict[int, str] = {e.id: run_key(e.name, e.id) for e in unfinished if e.id in self.runs}  # names stay
        del unfinished
        known: dict[int, Job] = {}  # jobs read whole; a job that a transition here changes is read again

        def read(jids: Iterable[int]) -> None:
            want = [j for j in jids if j not in known]
            if want:
                known.update(self.store.get_jobs(want))

        def job_of(jid: int) -> Job | None:
            return known.get(jid) or self.store.get_job(jid)

        def key_of(jid: int) -> str | None:  # a run the passes gave a job the read had no run for: read it
            if jid not in keys and (job := job_of(jid)) is not None:
                keys[jid] = job_key(job)
            return keys.get(jid)

        read(e.id for e, _ in unrecorded)
        for ej, live_run in unrecorded:
            if (job := known.pop(ej.id, None)) is not None:
                launch.started(self, job, live_run)
        for e in exits:
            if (jid := job_id_of(e.job)) is not None:
                known.pop(jid, None)
        with self.store.batch():  # taken as a turn takes them, in one transaction (a restart finds ~1,000)
            self._take_exits(exits)
        # replicas that ended unseen (an executor that keeps no exits across restarts)
        ended = [jid for jid, run in self.runs.items() if run.launched and live.get(key_of(jid) or "") != run.attempt]
        read(ended)
        for jid in ended:
            run = self.runs.get(jid)
            job = job_of(jid)
            if run is None or job is None:
                continue
            known.pop(jid, None)
            if job.spec.service is not None and set(range(job.nodes)) <= set(run.adding):
                continue  # every replica of the service waits to start again (its restart backoff): it runs on
            for rank in range(job.nodes):
                run.exits.setdefault(str(rank), "ended while the control plane was down")
                run.codes.setdefault(str(rank), None)
            if run.stopping is None:
                if all(c == 0 for c in run.codes.values()):
                    stop.finish(self, job, run, JobState.SUCCEEDED, "all replicas exited 0")
                    continue
                stop.begin_stop(self, job, run, failure_kind(job), "replicas ended while the control plane was down")
            stop.stopped(self, job, run)
        unlaunched = [jid for jid, run in self.runs.items() if not run.launched]
        read(unlaunched)
        for jid in unlaunched:
            run = self.runs.get(jid)
            job = job_of(jid)
            if run is not None and job is not None and job.state == JobState.PREEMPTED and not run.launched:
                known.pop(jid, None)
                stop.stopped(self, job, run)
        # what the store says was decided for a live attempt: only those are read whole
        due = [jid for jid, run in self.runs.items() if run.launched and live.get(key_of(jid) or "") == run.attempt
               and (run.starting or run.removing or run.stopping is not None)]
        read(due)
        self._carry_out(live, job_of, due)
        self.executor.ack(exits)  # every write above is committed (the exits' batch ended before the passes after it)

    def _carry_out(self, live: dict[str, int], job_of: Callable[[int], Job | None], due: list[int]) -> None:
        """Start-up: what the store says was decided for a live attempt (``due``: the jobs of those whose run
        has such a decision) is done again, whether or not it was done before the crash (each is idempotent): new
        ranks of a growth still being started are started (:func:`resize.finish_growth`), the ranks a shrink
        removes get their stop again, an attempt that is stopping (cancel, preemption, failure) gets its stop
        again."""
        res = capability(self.executor, Resizing)
        for jid in due:
            run = self.runs.get(jid)
            job = job_of(jid)
            if run is None or job is None or not run.launched or live.get(job_key(job)) != run.attempt:
                continue
            if run.starting:
                resize.finish_growth(self, job, run)
            if run.removing and run.stopping is None and res is not None and job.spec.service is None:
                # a service's are drained again instead, each until its stored time (Services._resume_drains)
                res.stop_replicas(job_key(job), run.attempt, sorted(int(r) for r in run.removing),
                                  job.spec.termination_grace_seconds)
            if run.moving and run.stopping is None:  # replicas leaving a lost node (transitions/relocation.py)
                relocation.stop_moving(self, job, run, sorted(int(r) for r in run.moving))
            if run.stopping is not None:
                self.executor.stop(job_key(job), run.attempt, job.spec.termination_grace_seconds)

    def event(self, kind: str, msg: str, job: Job | None = None, /, **data: Any) -> None:
        self.store.append_event(kind, msg, job_id=job.id if job else None, team=job.team if job else None,
                                node=data.pop("node", None), data=data)

    def cancel(self, job: Job, actor: str, left: str | None = None) -> Job:
        """Cancel ``job``; with ``left`` (an interactive allocation whose user left it: ``salloc``'s shell exited)
        a running job ends Succeeded instead, unless a cancel is under way already."""
        with self._change():
            job = self.store.get_job(job.id) or job
            if job.state.finished:
                raise WrongState(f"job {job.name} is already {job.state.value}", "job finished")
            job = self._cancel_one(job, actor, left)
            self.store.append_audit(actor, "job.cancel", f"{job.team}/{job.name}", {"id": job.id})
        self.wake.set()
        return job

    def set_priority(self, job: Job, priority_class: str | None, actor: str) -> Job:
        """A job's priority class changed after submission (``transitions.priority``)."""
        with self._change():
            job = priority.change(self, self.store.get_job(job.id) or job, priority_class, actor)
        self.wake.set()
        return job

    def cancel_array(self, tasks: list[Job], target: str, actor: str, chunk: int = 500) -> list[Job]:
        """Cancel those of ``tasks`` (a job array's, in order) that are unfinished, ``chunk`` at a time: each chunk
        under the lock in one transaction with one audit row naming its ids (``target``: team/array), the loop's
        turns and other requests in between. One ``cancel`` per task waited for a turn each (every cancel woke
        the loop, whose turn comes first): a 10,000-task array took minutes; now seconds."""
        done: list[Job] = []
        for i in range(0, len(tasks), chunk):
            with self._change(), self.store.batch():
                part = tasks[i:i + chunk]
                self.store.prefetch(t.id for t in part)
                ids = []
                for t in part:
                    job = self.store.get_job(t.id)
                    if job is not None and not job.state.finished:
                        done.append(self._cancel_one(job, actor))
                        ids.append(job.id)
                if ids:
                    self.store.append_audit(actor, "job.cancel", target, {"ids": ids})
                    array_holds.forget(self, ids)
            self.wake.set()
        return done

    def _cancel_one(self, job: Job, actor: str, left: str | None = None) -> Job:
        """The cancel of an unfinished ``job`` (under the lock)."""
        if job.state == JobState.PENDING:
            self.snap.remove_pending(to_engine(job.id))
            job = self.store.update_job(job.id, {"state": JobState.CANCELLED, "reason": f"cancelled by {actor}",
                                                 "finished_at": self.clock()})
            self.event("JobCancelled", f"job {job.name} cancelled by {actor}", job)
        else:
            run = self.runs.setdefault(job.id, Run(attempt=job.attempt))
            if left is not None and run.stopping is None:  # its user left it: done (Slurm's COMPLETED)
                stop.begin_stop(self, job, run, STOP_DONE, f"{left}; allocation relinquished by {actor}"[:300])
            elif left is not None and run.launched:
                stop.send_stop(self, job, run)
            elif run.stopping != STOP_CANCEL:  # a cancel wins over any other stop under way (a restart, a
                # failure, a preemption, a readiness timeout): what comes after the stop honours it
                run.restart_due = []
                stop.begin_stop(self, job, run, STOP_CANCEL, f"cancelled by {actor}")
                self.event("JobCancelling", f"job {job.name} is stopping: cancelled by {actor}", job)
            elif run.launched:  # stopping already: the stop is sent again (the first one may have failed)
                stop.send_stop(self, job, run)
            job = self.store.get_job(job.id) or job
            if not run.launched:
                stop.stopped(self, job, run)
                job = self.store.get_job(job.id) or job
        return job

    def report_progress(self, job: Job, step: int | None, checkpoint: str | None,
                        next_checkpoint_in: float | None = None) -> Job:
        with self._change():
            now = self.clock()
            changes: dict[str, Any] = {"checkpoint_step": step}
            if checkpoint:
                changes.update(checkpoint_at=now, checkpoint_path=checkpoint)
            job = self.store.update_job(job.id, changes)
            w = self.snap.running.get(to_engine(job.id))
            if w is not None and checkpoint:
                w.checkpoint = now
            if w is not None and next_checkpoint_in is not None:  # preemption may wait for it (policy)
                w.checkpoint_due = now + next_checkpoint_in
            return job

    def replica_ready(self, job: Job, rank: int, attempt: int) -> bool:
        """A replica said it is ready (``fairpod.sdk.ready``; gang readiness, ``server/core/transitions/readiness.py``)."""
        with self._change():
            return readiness.mark_ready(self, job, rank, attempt)

    def replica_recovered(self, job: Job, ranks: list[int], source: int, step: int, seconds: float) -> bool:
        """Replicas restarted in place got their state from a peer (``fairpod.sdk.peers``, ``server/restarts.py``)."""
        with self._change():
            return restarts.recovered(self, job, ranks, source, step, seconds)

    def replica_restarts(self, job: Job) -> dict[str, Any]:
        """The restarts in place of the job's live attempt (``fairpod.sdk.peer_restarts``)."""
        with self.lock:
            run = self.runs.get(job.id)
            if run is None:
                return {"attempt": job.attempt, "generation": 0, "restarts": []}
            return {"attempt": run.attempt, "generation": restarts.generation(run),
                    "restarts": [{"rank": int(r), "at": at} for r, at in run.restarts]}

    def replace_spec(self, spec: ClusterSpec, actor: str = "fairpod", action: str = "spec.apply") -> None:
        """Take a new (validated) cluster spec: store it (a new version in the history), sync nodes, rebuild
        the engine's view."""
        with self._change():
            active_teams = self.store.unfinished_teams()
            gone = sorted(active_teams - {t.name for t in spec.teams})
            if gone:
                raise WrongState(f"team(s) {', '.join(gone)} still have unfinished jobs; "
                                 "cancel them or wait for them to finish first", "team has jobs")
            sync_nodes(self.store.store, spec, busy={n for r in self.runs.values() for n in r.slots})
            self.store.put_spec(spec, actor=actor, action=action)
            self.spec = spec
            self._rebuild()
        self.wake.set()
