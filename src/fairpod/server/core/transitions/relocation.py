"""A replica restarted in place on another node: its own was lost or is out of service (issue 49).

A job that may restart a replica in place (``restarts_in_place``, with or without ``peer_recovery``) keeps its
healthy replicas' processes when one replica's node fails; that replica starts again, on its node when the node
still takes work, else on another one that the engine chooses (:mod:`fairpod.governance.relocation`: the same
instance type, room for the replica, the job's topology kept). The job's admission does not change: the replica's
request moves from one node to the other in the engine's snapshot, its team's usage stays as it is.

:func:`move` records the move, under the lock, in the turn's batch: the engine's snapshot, the job's
``placement`` and ``Run.nodes`` (rank order), the accelerator slots (the new node's taken now, or at the start
when a stopping job still holds them; the old node's given back once the replica there has ended), and a
``ReplicaMoved`` event naming both nodes and why. A replica still running on the lost node is stopped (the
executor's ``stop_replicas``, after the commit; ``Run.moving`` until its exit is taken, so that a restarted
control plane stops it again); its exit is then a restart in place of the job's budget
(:mod:`fairpod.server.core.transitions.restarts`), started on the new node by the executor
(:class:`fairpod.executors.base.Relocating`). No node free: the caller restarts the job whole, as before, and
its event says why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairpod.executors.base import Relocating, RestartingInPlace, StoppingReplicas, capability
from fairpod.governance import relocation as engine
from fairpod.server.runs import Run, SlotsBusy, job_key, to_engine
from fairpod.store.records import Job

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState


def may_move(cp: CoreState, job: Job, *, live: bool) -> bool:
    """Can a replica of ``job`` be restarted on another node (``live``: and stopped alone on its own first)?"""
    ex = cp.executor
    if job.spec.elastic or job.spec.service is not None:
        return False
    if capability(ex, RestartingInPlace) is None or capability(ex, Relocating) is None:
        return False
    return not live or capability(ex, StoppingReplicas) is not None


def refused(cp: CoreState, rank: int) -> str | None:
    """Why the executor cannot start replica ``rank`` on another node (on Ray, rank 0: it hosts the attempt's
    rendezvous, whose address the other replicas keep), or None: it can."""
    rel = capability(cp.executor, Relocating)
    return None if rel is None else rel.cannot_relocate(rank)


def node_down(cp: CoreState, node: str) -> str | None:
    """Why ``node`` takes no replica now (its fault, a cordon, a check under way), or None: it does (the store's
    word: the engine's view also takes every node out under ``cluster.isolation: required`` without isolation,
    which is no fault of the node)."""
    snode = cp.snap.nodes.get(node)
    if snode is not None and snode.schedulable:
        return None
    nd = cp.store.get_node(node)
    if nd is None or snode is None:
        return f"node {node} left the cluster"
    if nd.schedulable:
        return None
    if nd.fault_type:
        return f"node {node} fault: {nd.fault_type}: {nd.fault_reason or ''}".rstrip(": ")
    if nd.cordoned:
        return f"node {node} is cordoned"
    return f"node {node} is {nd.health_status.value}" + (
        f" (deep health check {nd.deep_health_check.value})" if nd.deep_health_check is not None else "")


def move(cp: CoreState, job: Job, run: Run, rank: int, why: str, *, live: bool) -> tuple[str | None, str]:
    """Replica ``rank`` of the job leaves its node (``why``) for the one the engine chooses: (the new node, "")
    recorded, or (None, why no node could take it) with nothing changed. ``live``: the replica still runs on
    its old node (stopped by the caller once this is committed; its slots there kept until it has ended)."""
    wid = to_engine(job.id)
    node, none = engine.replacement(cp.snap, wid, rank)
    if node is None:
        return None, none
    old = engine.move(cp.snap, wid, rank, node)
    placement = list(job.placement)
    placement[rank] = node
    run.nodes = list(placement)
    if live:
        run.moving[str(rank)] = [old, why]
    else:
        cp.slots.give_back(old, run.slots.pop(old, []))
    take_slots(cp, job, run, node)
    job = cp.store.save_run(job.id, run, {"placement": placement})
    cp.event("ReplicaMoved", f"job {job.name}: replica {rank} moves from node {old} to node {node} ({why}); the "
             "other replicas keep running", job, rank=rank, source=old, target=node, reason=why)
    return node, ""


def take_slots(cp: CoreState, job: Job, run: Run, node: str) -> bool:
    """The accelerator slots of the moved replica on ``node`` (``run.slots``): False while a stopping job
    still holds them (the restart waits; :func:`fairpod.server.core.transitions.restarts.launch_due`)."""
    if node in run.slots:
        return True
    try:
        run.slots[node] = cp.slots.take(node, job.acc, cp.spec.catalog()[job.instance_type].accelerators,
                                        cp._partitions_per_gpu(node))
    except SlotsBusy:
        return False
    return True


def arrived(cp: CoreState, run: Run, rank: int) -> str | None:
    """The exit of replica ``rank`` on the node it left is taken: its slots there go back. Returns the node it
    left (None: the replica was not moving)."""
    moving = run.moving.pop(str(rank), None)
    if moving is None:
        return None
    old = str(moving[0])
    if old not in run.nodes:
        cp.slots.give_back(old, run.slots.pop(old, []))
    return old


def stop_moving(cp: CoreState, job: Job, run: Run, ranks: list[int]) -> None:
    """SIGTERM to the replicas of ``ranks`` on the nodes they leave, once the store has committed their move (also
    at start-up for the moves stored: ``ControlPlane._carry_out``)."""
    res = capability(cp.executor, StoppingReplicas)
    if res is None or not ranks:
        return
    key, attempt, grace = job_key(job), run.attempt, job.spec.termination_grace_seconds
    cp.store.after_commit(lambda: res.stop_replicas(key, attempt, ranks, grace))
