"""The launch of an admitted attempt: once its victims have stopped, its accelerator slots are taken and stored
(:func:`ready`), the executor's launch is built (:func:`build_launch`, also for the new ranks of a job that grew:
:mod:`fairpod.server.core.transitions.resize`, or restarted in place: ``restarts``), and its replicas start off
the lock (:func:`launch_unlocked`), each start recorded (:func:`started`) or its failure ending the attempt."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairpod.executors.base import ExecutorError, HostGpus, JobLaunch, ReplicaLaunch, capability
from fairpod.model.jobs import JobState
from fairpod.model.spaces import files_key
from fairpod.server.access import identity
from fairpod.server.core.transitions import rayjobs, relocation, resize, serving, stop
from fairpod.server.runs import STOP_FAIL, Run, SlotsBusy, job_key, lacking
from fairpod.store.records import Job

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState

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


def ready(cp: CoreState) -> list[tuple[Job, Run]]:
    """Admitted attempts whose victims have stopped and whose accelerator slots are free: their slots are
    taken (and stored with the run) now. An attempt whose slots are still held by a stopping job waits."""
    out = []
    cat = cp.spec.catalog()
    for jid, run in lacking(cp.runs, "launched"):  # the few admitted, not started yet: filtered in C
        if run.launched or run.stopping is not None or any(int(v) in cp.runs for v in run.after):
            continue
        job = cp.store.get_job(jid)
        if job is None or job.state != JobState.RUNNING:
            continue
        if not run.slots:
            try:
                run.slots = cp.slots.take_all(job.placement, job.acc, cat[job.instance_type].accelerators,
                                              cp._partitions_per_gpu(job.placement[0] if job.placement else ""))
            except SlotsBusy as e:
                log.debug("job %s waits for accelerator slots: %s", job.name, e)
                continue
            job = cp._save_run(job, run)
        out.append((job, run))
    return out


def reserve_launches(cp: CoreState, ready: list[tuple[Job, Run]]) -> list[tuple[Job, Run, JobLaunch]]:
    """Under the lock, after the commit that stored their slots: what the executor needs for each attempt
    ``ready`` chose. Each is marked launched in memory from now on, so a stop that comes while its
    processes start (cancel, preemption, node fault) goes to the executor and waits for the replicas'
    exits instead of freeing the slots at once; :func:`launch_unlocked` records the start."""
    starts = []
    for job, run in ready:
        launch = launch_of(cp, job, run)
        if launch is not None:
            run.launched = True
            starts.append((job, run, launch))
    return starts


def launch_unlocked(cp: CoreState, starts: list[tuple[Job, Run, JobLaunch]]) -> None:
    """Start the reserved attempts without holding the lock (submits and lists go on meanwhile), then,
    under it and in one commit, record each start (``JobStarted``) or failure. A stop asked while they
    started is sent again now that the replicas exist."""
    if not starts:
        return
    done: list[tuple[Job, Run, ExecutorError | None]] = []
    for job, run, launch in starts:
        try:
            cp.executor.launch(launch)
            done.append((job, run, None))
        except ExecutorError as e:
            done.append((job, run, e))
        except Exception as e:  # a bug: this attempt fails, the others are still recorded
            log.exception("launch of job %s failed", job.name)
            done.append((job, run, ExecutorError(f"launch failed: {e}")))
    with cp._turn(), cp.store.batch():
        cp.store.prefetch(job.id for job, _, _ in done)  # one query for all of them
        for job, run, err in done:
            cur = cp.runs.get(job.id)
            if cur is None or cur.attempt != run.attempt:  # no longer in memory (rebuilt from the store)
                if err is None:
                    cp.executor.stop(job_key(job), run.attempt, 0.0)
                continue
            job = cp.store.get_job(job.id) or job
            if err is not None:
                launch_failed(cp, job, cur, err)
                continue
            started(cp, job, cur)
            if cur.stopping is not None:
                cp.executor.stop(job_key(job), cur.attempt, job.spec.termination_grace_seconds)
            elif cur.moving:  # a node failed while they started: its replica leaves it (relocation.py)
                relocation.stop_moving(cp, job, cur, sorted(int(r) for r in cur.moving))


def launch_of(cp: CoreState, job: Job, run: Run) -> JobLaunch | None:
    """The executor's launch of an admitted attempt on its slots; None (and the job failed) when its
    devices cannot be had."""
    try:
        launch = build_launch(cp, job, run)
    except ExecutorError as e:
        launch_failed(cp, job, run, e)
        return None
    if any(len(r.accelerators) != job.acc for r in launch.replicas):  # never short: ready took them all
        raise RuntimeError(f"job {job.name}: accelerator slots {run.slots} do not match {job.acc} per node")
    run.after = []
    return launch


def build_launch(cp: CoreState, job: Job, run: Run, ranks: list[int] | None = None) -> JobLaunch:
    """What the executor gets to start the replicas of ``ranks`` of the job's attempt on their slots: all of
    them (a launch), or the new ranks of a job that grew (``world`` then says how many there are in all).
    Raises ExecutorError when their devices cannot be had."""
    grow = ranks is not None
    ranks = list(range(len(job.placement))) if ranks is None else ranks
    nodes = [job.placement[r] for r in ranks]
    devices = {n: partition_devices(cp, n, list(run.slots.get(n, []))) for n in nodes}
    return JobLaunch(
        job=job_key(job), team=job.team, attempt=job.attempt, command=rayjobs.command(job),
        checkpoint_dir=str(cp.checkpoint_root() / job.team / (files_key(job.name) if job.spec.service is not None
                                                              and job.spec.service.space else job_key(job))),
        env={**job.spec.env, **cp.launch_env(job), **resize.env(job), **serving.service_env(cp, job, run),
             **rayjobs.env(job),
             "FAIRPOD_PREEMPTION_COUNT": str(job.preemptions)},
        workdir=job.spec.workdir, grace_seconds=job.spec.termination_grace_seconds,
        run_as=identity.job_user(cp.spec, job.spec) or cp.spec.run_as(job.team),
        umask=identity.job_umask(cp.spec, job.spec), world=len(job.placement) if grow else 0,
        container=container_of(job.spec.image, job.spec.image_pull_policy, job.spec.mounts, job.spec.workdir,
                               cp.home / "registries" / f"{job.team}.json", job.spec.scratch,
                               entrypoint=job.spec.replace_entrypoint, ray=job.spec.ray),
        readiness=job.spec.service.readiness_command if job.spec.service is not None else None,
        mounts_allow=tuple(cp.spec.cluster.mounts.allow),
        log_max_bytes=cp.spec.policy.log_max_bytes, spare=job.spec.peer_recovery,
        replicas=tuple(ReplicaLaunch(rank=r, node=n, accelerators=tuple(run.slots.get(n, [])),
                                     real_gpus=cp._gpus_are_real(n), devices=devices[n],
                                     mcpu=job.mcpu, mib=job.mib)
                       for r, n in zip(ranks, nodes, strict=True)),
    )  # fmt: skip


def launch_failed(cp: CoreState, job: Job, run: Run, e: ExecutorError) -> None:
    run.launched = True
    for rank in range(job.nodes):
        run.exits[str(rank)] = str(e)
        run.codes[str(rank)] = None
    stop.begin_stop(cp, job, run, STOP_FAIL, f"could not start: {e}")
    stop.stopped(cp, cp.store.get_job(job.id) or job, run)


def started(cp: CoreState, job: Job, run: Run) -> None:
    """Record that an attempt's replicas exist (also when found live after a crash)."""
    run.launched = True
    job = cp._save_run(job, run, started_at=cp.clock())
    cp.event("JobStarted", f"job {job.name} started (attempt {job.attempt}) on {', '.join(job.placement)}",
             job, attempt=job.attempt, nodes=list(job.placement))


def partition_devices(cp: CoreState, node: str, slots: list[int]) -> tuple[str, ...]:
    """The MIG device UUIDs of a node's partition slots, from the executor (:class:`HostGpus`); () when the
    node's GPUs are not real or not partitioned. Raises ExecutorError when a GPU does not have the MIG
    devices its group's profile says (MIG not configured so)."""
    g = cp._group_of(node)
    if g is None or not g.accelerator_partition_type or g.accelerators_are != "gpus":
        return ()
    gpus = capability(cp.executor, HostGpus)
    if gpus is None:
        return ()
    return gpus.mig_devices(node, slots, cp._partitions_per_gpu(node), g.accelerator_partition_type)

