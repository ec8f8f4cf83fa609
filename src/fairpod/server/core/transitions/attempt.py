"""The attempt's life: admitted by the engine, ready (its victims stopped, its slots free), launched, its
replicas' exits, a stop begun, every replica stopped, finished. Grow and shrink of a running attempt are in
:mod:`fairpod.server.core.transitions.resize`; both start replicas with :meth:`AttemptLife.build_launch`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fairpod.executors import registry
from fairpod.executors.base import ExecutorError, HostGpus, JobLaunch, ReplicaExit, ReplicaLaunch, capability
from fairpod.governance import Admit, Preempt, Wait
from fairpod.model.jobs import JobState
from fairpod.model.keys import job_id_of
from fairpod.model.spaces import files_key
from fairpod.sandbox import capabilities
from fairpod.server.access import identity
from fairpod.server.accounting import goodput
from fairpod.server.core.transitions import (
    backoff,
    goodput_spans,
    rayjobs,
    readiness,
    relocation,
    resize,
    restarts,
    serving,
)
from fairpod.server.runs import (
    STOP_CANCEL,
    STOP_DONE,
    STOP_FAIL,
    STOP_NOT_READY,
    STOP_PREEMPT,
    STOP_RESTART,
    Run,
    SlotsBusy,
    failure_kind,
    from_engine,
    job_key,
    lacking,
    usage_message,
)
from fairpod.store.records import Job

log = logging.getLogger("fairpod.control")


def container_of(image: str | None, pull: str | None, mounts: list[str], workdir: str | None,
                 auth: Path, scratch: list[str] | None = None, *, entrypoint: bool = False,
                 ray: bool = False) -> dict[str, Any] | None:
    """The ``container`` of a job's launch (fairpod.sandbox.container), None for a host command; ``auth`` is the
    team's registry logins (fairpod.server.access.registries), passed on only when the team has some; ``entrypoint``:
    the command replaces the image's ENTRYPOINT; ``ray``: a Ray job, whose launcher the node binds in."""
    if not image:
        return None
    if ray and not any(d.split(":")[0] == "/dev/shm" for d in scratch or ()):  # Ray's object store: its own, sized
        scratch = [*(scratch or ()), "/dev/shm"]  # to the replica's memory (podman's 64 MiB would put it in /tmp)
    return {"image": image, "pull": pull, "mounts": list(mounts), "workdir": workdir,
            "auth_file": str(auth) if auth.exists() else None, **({"scratch": list(scratch)} if scratch else {}),
            **({"entrypoint": "replace"} if entrypoint or ray else {}), **({"ray": True} if ray else {})}


class AttemptLife:
    """The part of :class:`fairpod.server.core.ControlPlane` that takes a job's attempt through its life."""

    def admit(self, d: Admit) -> None:
        """The engine admitted a pending job: Running on ``d.nodes``; it launches once ``d.after`` stopped."""
        job = self.store.get_job(from_engine(d.job))
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
        jid = from_engine(d.job)
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
        for jid, run in lacking(self.runs, "launched"):  # the few admitted, not started yet: filtered in C
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
                elif cur.moving:  # a node failed while they started: its replica leaves it (relocation.py)
                    relocation.stop_moving(self, job, cur, sorted(int(r) for r in cur.moving))

    def _launch_of(self, job: Job, run: Run) -> JobLaunch | None:
        """The executor's launch of an admitted attempt on its slots; None (and the job failed) when its
        devices cannot be had."""
        try:
            launch = self.build_launch(job, run)
        except ExecutorError as e:
            self._launch_failed(job, run, e)
            return None
        if any(len(r.accelerators) != job.acc for r in launch.replicas):  # never short: _ready took them all
            raise RuntimeError(f"job {job.name}: accelerator slots {run.slots} do not match {job.acc} per node")
        run.after = []
        return launch

    def build_launch(self, job: Job, run: Run, ranks: list[int] | None = None) -> JobLaunch:
        """What the executor gets to start the replicas of ``ranks`` of the job's attempt on their slots: all of
        them (a launch), or the new ranks of a job that grew (``world`` then says how many there are in all).
        Raises ExecutorError when their devices cannot be had."""
        grow = ranks is not None
        ranks = list(range(len(job.placement))) if ranks is None else ranks
        nodes = [job.placement[r] for r in ranks]
        devices = {n: self._partition_devices(n, list(run.slots.get(n, []))) for n in nodes}
        return JobLaunch(
            job=job_key(job), team=job.team, attempt=job.attempt, command=rayjobs.command(job),
            checkpoint_dir=str(self.checkpoint_root() / job.team / (files_key(job.name) if job.spec.service is not None
                                                                    and job.spec.service.space else job_key(job))),
            env={**job.spec.env, **self.launch_env(job), **resize.env(job), **serving.service_env(self, job, run),
                 **rayjobs.env(job),
                 "FAIRPOD_PREEMPTION_COUNT": str(job.preemptions)},
            workdir=job.spec.workdir, grace_seconds=job.spec.termination_grace_seconds,
            run_as=identity.job_user(self.spec, job.spec) or self.spec.run_as(job.team),
            umask=identity.job_umask(self.spec, job.spec), world=len(job.placement) if grow else 0,
            container=container_of(job.spec.image, job.spec.image_pull_policy, job.spec.mounts, job.spec.workdir,
                                   self.home / "registries" / f"{job.team}.json", job.spec.scratch,
                                   entrypoint=job.spec.replace_entrypoint, ray=job.spec.ray),
            readiness=job.spec.service.readiness_command if job.spec.service is not None else None,
            mounts_allow=tuple(self.spec.cluster.mounts.allow),
            log_max_bytes=self.spec.policy.log_max_bytes, spare=job.spec.peer_recovery,
            replicas=tuple(ReplicaLaunch(rank=r, node=n, accelerators=tuple(run.slots.get(n, [])),
                                         real_gpus=self._gpus_are_real(n), devices=devices[n],
                                         mcpu=job.mcpu, mib=job.mib)
                           for r, n in zip(ranks, nodes, strict=True)),
        )  # fmt: skip

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
                   job, attempt=job.attempt, nodes=list(job.placement))

    def _isolation_gap(self) -> str | None:
        """Why no node takes a job under ``cluster.isolation: required`` (fairpod.sandbox.capabilities)."""
        return capabilities.required_gap(self.spec.cluster.isolation, registry.elsewhere(self.executor.name))

    def _wait_reason(self, d: Wait) -> str:
        """A job back in its queue after a preemption says so until it runs again."""
        if (gap := self._isolation_gap()) is not None:
            return gap
        job = self.store.get_job(from_engine(d.job))
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
        if resize.removed(run, e):  # an elastic job shrank: that replica's end ends nothing else
            resize.replica_gone(self, jid, run, e)
            return
        job = self.store.get_job(jid)
        if job is None:
            return
        if not run.launched and e.started:  # started, but the control plane died before it recorded that
            self._started(job, run)
            job = self.store.get_job(jid) or job
        if job.spec.service is not None and run.stopping is None and job.state == JobState.RUNNING:
            serving.replica_exited(self, job, run, e)  # a service runs until deleted: that replica starts again
            return
        run.exits[str(e.rank)] = e.reason
        run.codes[str(e.rank)] = e.returncode
        if use := run.record_usage(e.rank, e.cpu_seconds, e.memory_peak_bytes):
            self.event("ReplicaUsage", usage_message(job.name, use), job, **use)
        if e.reason.startswith("image pull failed"):  # the job's image, not its node (fairpod.sandbox.container)
            self.event("ImagePullFailed", f"job {job.name} replica {e.rank}: {e.reason}", job, attempt=e.attempt)
        if run.stop_at is not None and getattr(self.clock, "from_wall", float)(e.ended_at) < run.stop_at:
            run.before_stop.append(str(e.rank))  # it ended on its own before the stop was asked
        if run.stopping is None:
            # a log rule stopped it (server/core/transitions/logrules.py), or its node was lost (relocation.py)
            faulted = not e.ok or str(e.rank) in run.log_faults or str(e.rank) in run.moving
            if not e.started:  # its launch never reached its node: the attempt stops, the job is queued again
                self.begin_stop(job, run, STOP_PREEMPT, f"replica {e.rank} {e.reason}")
            elif faulted and restarts.decide(self, job, run, e):  # restart that replica only (server/core/transitions/restarts.py)
                pass
            elif faulted:
                self.begin_stop(job, run, failure_kind(job), f"replica {e.rank} {restarts.why(run, e)}")
            elif len(run.exits) == job.nodes and not run.restart_due:
                self.finish(job, run, JobState.SUCCEEDED, "all replicas exited 0")
                return
            elif job.spec.elastic:  # torchrun's elastic agents exit 0 only once the group's training is done
                run.before_stop.append(str(e.rank))  # it ended on its own: whatever stop comes next, it finished
                self.begin_stop(job, run, STOP_DONE, f"replica {e.rank} finished the training; the other replicas "
                                "are stopped (an elastic job is done when one of its replicas is)")
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
            self._send_stop(job, run)

    def _send_stop(self, job: Job, run: Run) -> None:
        """The executor stops the attempt once the store has committed that it is stopping (``after_commit``): a
        crash in between leaves a stored stop that start-up sends again (``ControlPlane._carry_out``)."""
        key, attempt, grace = job_key(job), run.attempt, job.spec.termination_grace_seconds
        self.store.after_commit(lambda: self.executor.stop(key, attempt, grace))

    def output_seen(self, job: Job) -> float | None:
        """When a replica of the job's current attempt last wrote output, on the control plane's clock (None: no
        log here). A log that grew since the previous look (the watchdog's, once a second) was written then; the
        logs' mtimes are wall-clock times, which a step of the wall clock moves (server.runtime.steadyclock), so an mtime
        is read only at the first look at an attempt (and taken as no later than now)."""
        now, sizes, latest = self.clock(), {}, None
        from_wall = getattr(self.clock, "from_wall", float)
        for rank in range(job.nodes):
            path = self.executor.log_path(job_key(job), rank, job.attempt)
            try:
                st = path.stat() if path is not None else None
            except OSError:
                st = None
            if st is not None:
                sizes[rank] = st.st_size
                latest = max(latest or 0.0, min(now, from_wall(st.st_mtime)))
        if not sizes:
            return None
        seen = self.output_sizes.get(job.id)
        if seen is None or seen[0] != job.attempt:
            if len(self.output_sizes) > 2 * len(self.runs) + 100:  # ended jobs' sizes go
                for jid in [j for j in self.output_sizes if j not in self.runs]:
                    del self.output_sizes[jid]
            self.output_sizes[job.id] = (job.attempt, sizes, latest or now)
        elif any(n > seen[1].get(r, 0) for r, n in sizes.items()):  # grew (a rank that left: not a sign of life)
            self.output_sizes[job.id] = (job.attempt, sizes, now)
        else:
            self.output_sizes[job.id] = (job.attempt, sizes, seen[2])
        return self.output_sizes[job.id][2]

    def gpu_utilization(self, job: Job, run: Run) -> list[float] | None:
        """Utilization (%) of the GPUs the job holds, when they are real GPUs the executor can read
        (:class:`fairpod.executors.base.HostGpus`); None otherwise."""
        gpus = capability(self.executor, HostGpus)
        if gpus is None or not run.slots:
            return None
        nodes = [n for n in run.slots if self._gpus_are_real(n)]
        if not nodes:
            return None
        held = list(dict.fromkeys(i // self._partitions_per_gpu(n) for n in nodes for i in run.slots[n]))
        return gpus.gpu_utilization(held)

    def finish(self, job: Job, run: Run, state: JobState, reason: str) -> None:
        goodput_spans.account(self, job, run, None if state == JobState.SUCCEEDED else
                              "cancelled" if state == JobState.CANCELLED else goodput.cause_of(run.stopping, reason))
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
        finished = sorted(r for r in run.before_stop if run.codes.get(r) == 0)
        if job.spec.elastic and kind != STOP_CANCEL and finished:
            # a replica of an elastic job that ended 0 on its own finished the training: the others' ends (the
            # rendezvous store gone with it, a stop) do not undo that (Kubeflow's PyTorchJob: elastic success
            # is any worker's)
            kind = run.stopping = STOP_DONE
            run.stop_reason = f"replica {finished[0]} finished the training (elastic)"
        if kind == STOP_DONE:
            self.finish(job, run, JobState.SUCCEEDED, run.stop_reason)
        elif kind == STOP_CANCEL:
            self.finish(job, run, JobState.CANCELLED, run.stop_reason)
        elif kind == STOP_FAIL:
            self.finish(job, run, JobState.FAILED, run.stop_reason)
        elif kind in (STOP_PREEMPT, STOP_RESTART, STOP_NOT_READY):
            goodput_spans.account(self, job, run, goodput.cause_of(kind, run.stop_reason))
            self._release(job, run)
            now = self.clock()
            changes: dict[str, Any] = {"state": JobState.PENDING, "enqueued_at": now, "run_state": run.to_json(),
                                       "placement": [], "borrowed_from": {}, "nodes": job.spec.nodes}
            if kind == STOP_RESTART:
                changes["attempt"] = job.attempt + 1
                changes["reason"] = f"restarting: {run.stop_reason}"
                changes.update(backoff.restart_changes(self.spec.policy, job, changes["run_state"], run.stop_reason,
                                                       now))
            elif kind == STOP_NOT_READY:  # back to its queue after a backoff, same attempt (server/core/transitions/readiness.py)
                changes.update(readiness.requeue_changes(self, job, changes["run_state"], run.stop_reason, now))
            job = self.store.update_job(job.id, changes)
            if kind == STOP_RESTART:
                self.event("JobRestarting", f"job {job.name}: {run.stop_reason} (restart {job.attempt} of "
                           f"{job.max_retry})", job, attempt=job.attempt, restart="full")
            else:
                self.event("JobRequeued", f"job {job.name} stopped and is back in its queue", job)
            if not backoff.hold(self, job):
                self.snap.add_pending(self.workload(job))
            self.wake.set()

    def _partition_devices(self, node: str, slots: list[int]) -> tuple[str, ...]:
        """The MIG device UUIDs of a node's partition slots, from the executor (:class:`HostGpus`); () when the
        node's GPUs are not real or not partitioned. Raises ExecutorError when a GPU does not have the MIG
        devices its group's profile says (MIG not configured so)."""
        g = self._group_of(node)
        if g is None or not g.accelerator_partition_type or g.accelerators_are != "gpus":
            return ()
        gpus = capability(self.executor, HostGpus)
        if gpus is None:
            return ()
        return gpus.mig_devices(node, slots, self._partitions_per_gpu(node), g.accelerator_partition_type)
