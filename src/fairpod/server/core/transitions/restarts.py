"""Restart in place before restarting the job (HyperPod's ``numRestartBeforeFullJobRestart``,
``evalPeriodSeconds``, ``maxFullJobRestarts``).

When a replica of a job with ``restarts_in_place: N`` fails, and fewer than N replicas of its attempt were
restarted in place within the last ``restart_eval_period_seconds``, only that replica's process is started
again on its node: the other replicas keep running (their PIDs do not change). When its node takes no work any
more (a fault, a cordon), or fails under the running replica (:func:`node_lost`, from the node's fault), the
replica starts on another node the engine chooses (:mod:`fairpod.server.core.transitions.relocation`). Otherwise the job restarts
whole as before (auto-resume: ``max_retry`` full restarts, then Failed).

The transition has two steps, so that an exit is never acknowledged on a restarted replica's run:

1. :func:`decide` (from :func:`fairpod.server.core.transitions.exit.exit`, under the lock, in the turn's batch): the rank is due for a
   restart (``Run.restart_due``, stored with the run) and a ``ReplicaRestarting`` event says so. Its exit stays
   in ``Run.exits`` (an exit delivered again changes nothing);
2. :func:`launch_due` (a keeper after the turn's commit and the exits' acknowledgement): the executor starts the
   rank again (:class:`fairpod.executors.base.RestartingInPlace`), the rank's exit is forgotten, the restart
   recorded (``Run.restarts``) and a ``ReplicaRestarted`` event written. A rank the executor already runs (a
   crash between the start and its record) is only recorded.

The other ranks learn of it from :func:`fairpod.sdk.peer_restarts` (the count of restarts in place of the attempt,
``GET /jobs/{job}/restarts``) and the restarted one from ``FAIRPOD_REPLICA_RESTARTS`` (its own count) and
``FAIRPOD_RESTART_GENERATION``, so torchrun-elastic and plain DDP programs can re-form their group. Executors
without the capability, and elastic jobs (they shrink instead), always restart whole.

Peer recovery (``peer_recovery``, :mod:`fairpod.sdk.peers`): the restarted rank waits for a peer's state
(``Run.recovering``) and nothing is accounted as lost at its start; :func:`recovered` (the report of the rank that
gave its state) writes ``ReplicaRecovered`` and the goodput of the span, the work kept up to the fault. A second
replica of the attempt lost while one is due or recovering cannot be recovered so (the group is being formed
again): :func:`decide` leaves it to the job's restart from its checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from fairpod.executors.base import ExecutorError, ReplicaExit, RestartingInPlace, StoppingReplicas, capability
from fairpod.model.jobs import JobState
from fairpod.server.core.transitions import goodput_spans, relocation
from fairpod.server.runs import Run, failure_kind, having, job_key
from fairpod.store.records import Job

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState

log = logging.getLogger("fairpod.restarts")


def recent(job: Job, run: Run, now: float) -> int:
    """Restarts in place of the attempt within the job's evaluation period."""
    return sum(1 for _, at in run.restarts if now - at < job.spec.restart_eval_period_seconds)


def why(run: Run, e: ReplicaExit) -> str:
    """Why the replica ended: the log rule that stopped it (``fairpod.server.core.transitions.logrules``), else its exit."""
    return run.log_faults.pop(str(e.rank), None) or e.reason


def decide(cp: CoreState, job: Job, run: Run, e: ReplicaExit) -> bool:
    """A replica failed while the attempt runs: True when it is to be restarted in place (``Run.restart_due``),
    on its node, or on another when its node takes no work now (:mod:`fairpod.server.core.transitions.relocation`).
    A log rule's ``restart_in_place`` gets at least one restart in place per evaluation period."""
    if str(e.rank) in run.moving:  # its node was lost: the move was decided then (node_lost), the budget counted
        old, lost = run.moving[str(e.rank)]
        relocation.arrived(cp, run, e.rank)
        run.restart_due.append(e.rank)
        cp.event("ReplicaRestarting", f"job {job.name}: replica {e.rank} stopped on node {old} ({lost}); restarting "
                 f"it on node {job.placement[e.rank]} (the other replicas keep running)", job, rank=e.rank,
                 restart="in-place", in_place=recent(job, run, cp.clock()) + len(run.restart_due), source=old,
                 target=job.placement[e.rank])
        return True
    n = job.spec.restarts_in_place
    if str(e.rank) in run.log_faults:
        n = max(n, 1)
    if n <= 0 or job.spec.elastic or capability(cp.executor, RestartingInPlace) is None:
        return False
    reason = why(run, e)
    done = refused(cp, job, run, e.rank, reason, n)
    if done is None:
        return False
    where = "in place"
    if (down := relocation.node_down(cp, job.placement[e.rank])) is not None:
        no = (relocation.refused(cp, e.rank) if relocation.may_move(cp, job, live=False)
              else f"the {cp.executor.name} executor cannot start it on another node")
        node, none = relocation.move(cp, job, run, e.rank, down, live=False) if no is None else (None, no)
        if node is None:
            run.log_faults[str(e.rank)] = f"{reason}; {down}"
            cp.event("ReplicaRestarting", f"job {job.name}: replica {e.rank} {reason}; {down} and no other node "
                     f"can take the replica ({none}): the job restarts whole", job, rank=e.rank, restart="full",
                     in_place=done, fallback="full", why=none)
            return False
        where = f"on node {node} ({down})"
    run.restart_due.append(e.rank)
    cp.event("ReplicaRestarting", f"job {job.name}: replica {e.rank} {reason}; restarting it {where} "
             f"({done + 1} of {n} within {job.spec.restart_eval_period_seconds:g} s; the other replicas keep "
             "running)", job, rank=e.rank, restart="in-place", in_place=done + 1)
    return True


def refused(cp: CoreState, job: Job, run: Run, rank: int, reason: str, n: int) -> int | None:
    """The restarts in place counted against the budget ``n`` of the job's evaluation period (those due and those
    moving too), or None when replica ``rank``'s restart in place is refused (the budget spent, or another
    replica being recovered from peers): a ``ReplicaRestarting`` event says why, the job restarts whole."""
    done = recent(job, run, cp.clock()) + len(run.restart_due) + len(run.moving)
    others = sorted({*run.restart_due, *map(int, run.recovering), *map(int, run.moving)} - {rank})
    if job.spec.peer_recovery and others:
        run.log_faults[str(rank)] = reason
        cp.event("ReplicaRestarting", f"job {job.name}: replica {rank} {reason} while replica "
                 f"{', '.join(map(str, others))} is recovered from its peers: two replicas lost at once cannot be "
                 "recovered from peers; the job restarts from its checkpoint", job, rank=rank, restart="full",
                 in_place=done, fallback="checkpoint", recovering=others)
        return None
    if done >= n:
        run.log_faults[str(rank)] = reason  # the full restart's reason names it too
        cp.event("ReplicaRestarting", f"job {job.name}: replica {rank} {reason}; {done} restart"
                 f"{'s' if done != 1 else ''} in place within {job.spec.restart_eval_period_seconds:g} s "
                 "already: the job restarts whole", job, rank=rank, restart="full", in_place=done)
        return None
    return done


def node_lost(cp: CoreState, job: Job, run: Run, node: str, why: str) -> bool:
    """``node`` failed (``why``) under a replica of the running attempt: True when that replica alone moves to
    another node (recorded, and stopped on ``node`` once committed), the other replicas kept running; False
    when the job is to restart whole as before (a ``ReplicaRestarting`` event says why, when a move was tried)."""
    rank = job.placement.index(node)
    live = str(rank) not in run.exits
    if job.spec.restarts_in_place <= 0 or not relocation.may_move(cp, job, live=live) or (
            not live and rank not in run.restart_due):
        return False
    if (no := relocation.refused(cp, rank)) is not None:
        cp.event("ReplicaRestarting", f"job {job.name}: replica {rank} lost with its node ({why}); {no}: the job "
                 "restarts whole", job, rank=rank, restart="full", fallback="full", why=no)
        return False
    if not live:  # ended already, its restart due: it starts on the new node
        return relocation.move(cp, job, run, rank, why, live=False)[0] is not None
    if refused(cp, job, run, rank, why, job.spec.restarts_in_place) is None:
        return False
    target, none = relocation.move(cp, job, run, rank, why, live=True)
    if target is None:
        cp.event("ReplicaRestarting", f"job {job.name}: replica {rank} lost with its node ({why}); no other node "
                 f"can take it ({none}): the job restarts whole", job, rank=rank, restart="full", fallback="full",
                 why=none)
        return False
    relocation.stop_moving(cp, job, run, [rank])
    return True


def generation(run: Run) -> int:
    """How many restarts in place the attempt has had: what :func:`fairpod.sdk.peer_restarts` returns."""
    return len(run.restarts)


def launch_due(cp: CoreState) -> None:
    """Start the replicas due for a restart in place (a keeper: after the turn's commit, exits acknowledged)."""
    for jid, run in having(cp.runs, "restart_due"):  # the few with a restart due: filtered in C
        if not run.restart_due or run.stopping is not None:
            continue
        job = cp.store.get_job(jid)
        if job is None or job.state != JobState.RUNNING:
            continue
        ranks = sorted(set(run.restart_due))
        ex = capability(cp.executor, RestartingInPlace)
        sizing = capability(cp.executor, StoppingReplicas)
        live = sizing.replica_ranks(job_key(job), run.attempt) if sizing is not None else set()
        todo = [r for r in ranks if r not in live]  # a rank already live: started before a crash, record it
        fresh = [job.placement[r] for r in todo if job.placement[r] not in run.slots]  # moved (relocation)
        if fresh:
            if not all(relocation.take_slots(cp, job, run, n) for n in fresh):
                continue  # a stopping job still holds the new node's slots: a later turn starts it
            job = cp.store.update_job(job.id, {"run_state": run.to_json()})  # its slots stored before it starts
        try:
            if ex is None:
                raise ExecutorError(f"the {cp.executor.name} executor cannot restart a replica in place")
            if todo:
                own = {r: sum(1 for rr, _ in run.restarts if int(rr) == r) + 1 for r in todo}
                launch = cp.build_launch(job, run, todo)
                for r in todo:
                    env = {**launch.env, "FAIRPOD_REPLICA_RESTARTS": str(own[r]),
                           "FAIRPOD_RESTART_GENERATION": str(generation(run) + len(ranks))}
                    one = dataclasses.replace(launch, env=env, replicas=tuple(x for x in launch.replicas
                                                                             if x.rank == r))
                    ex.restart_replicas(one)
        except ExecutorError as err:
            log.warning("job %s: restart in place of ranks %s failed: %s", job.name, ranks, err)
            run.restart_due = []
            cp.begin_stop(job, run, failure_kind(job), f"replica {ranks[0]} could not be restarted in place: {err}")
            continue
        now = cp.clock()
        if job.spec.peer_recovery:  # the work is kept if a peer hands its state over (recovered)
            for r in ranks:
                run.recovering[str(r)] = [now, run.exits.get(str(r), "failed")]
        else:
            goodput_spans.account(cp, job, run, "restart", restart_in_place=True)  # the job goes back to its checkpoint
        for r in ranks:
            run.exits.pop(str(r), None)
            run.codes.pop(str(r), None)
            run.restarts.append([r, now])
        run.restart_due = []
        job = cp.store.update_job(job.id, {"run_state": run.to_json()})
        cp.event("ReplicaRestarted", f"job {job.name}: replica{'s' if len(ranks) > 1 else ''} "
                 f"{', '.join(map(str, ranks))} restarted in place on {', '.join(job.placement[r] for r in ranks)} "
                 f"(restart in place {generation(run)} of the attempt"
                 f"{'; its state comes from a peer' if job.spec.peer_recovery else ''})", job, ranks=ranks,
                 restart="in-place", generation=generation(run), peer_recovery=job.spec.peer_recovery)


def recovered(cp: CoreState, job: Job, ranks: list[int], source: int, step: int, seconds: float) -> bool:
    """``ranks`` (restarted in place) got the state of rank ``source`` at ``step`` from its memory: a
    ``ReplicaRecovered`` event, and the goodput of the span (kept up to the fault, the recovery's time lost to
    ``restart``). False when none of them is waiting for it (another attempt, already reported)."""
    run = cp.runs.get(job.id)
    if run is None or run.stopping is not None or job.state != JobState.RUNNING:
        return False
    mine = [r for r in ranks if str(r) in run.recovering]
    if not mine:
        return False
    since = min(float(run.recovering[str(r)][0]) for r in mine)
    reasons = "; ".join(f"replica {r} {run.recovering.pop(str(r))[1]}" for r in mine)
    goodput_spans.recovered(cp, job, run, since)
    cp.store.update_job(job.id, {"run_state": run.to_json()})
    cp.event("ReplicaRecovered", f"job {job.name}: replica{'s' if len(mine) > 1 else ''} "
             f"{', '.join(map(str, mine))} recovered from replica {source}'s memory at step {step}, "
             f"{seconds:.1f} s after the fault, without a checkpoint (the other replicas kept their processes; "
             f"{reasons})", job, ranks=mine, source=source, step=step, seconds=round(seconds, 3),
             reason=reasons, generation=generation(run))
    return True
