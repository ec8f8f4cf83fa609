"""The transitions of a node: joined, cordoned, its labels, a deep health check started / passed / failed, a
fault, a recovery asked for, restarted, recovered, left. Each writes the store, then the engine's view of the
node, under the lock. Each is a function of the core's state; the plane's commands of the same names (the door,
:class:`fairpod.server.core.api.Core`) call them, and :mod:`fairpod.health.manager`,
:mod:`fairpod.server.core.transitions.membership` and the admin routes call those."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fairpod.model.nodes import DeepHealthCheck, NodeHealth
from fairpod.model.resources import node_res
from fairpod.server.core.transitions import admit, restarts, stop
from fairpod.server.nodes import ACTION_STATUS
from fairpod.server.runs import failure_kind
from fairpod.store.records import Node

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState


def add_node(cp: CoreState, name: str, group: str, itype: str, **fields: Any) -> None:
    """A node joined (e.g. a Ray node): store it and let the engine use it."""
    cp._groups.clear()
    with cp._change():
        cat = cp.spec.catalog()
        if itype not in cat:
            raise ValueError(f"node {name}: unknown instance type {itype!r}")
        node = cp.store.get_node(name)
        if node is None:
            node = cp.store.add_node(name, group, itype, **fields)
            cp.event("NodeJoined", f"node {name} ({itype}) joined", node=name)
        if name not in cp.snap.nodes:
            cp.snap.add_node(name, itype, node_res(cat[itype]), schedulable=node.schedulable,
                               passed=node.deep_health_check == DeepHealthCheck.PASSED,
                               topology=cp.spec.node_topology(node.instance_group, name, node.labels))
    cp.wake.set()


def _update_node(cp: CoreState, name: str, changes: dict[str, Any]) -> Node:
    """Change a node's stored fields (cordon, health status, deep health check, labels) and the engine's
    view of it (schedulable, passed) together: the one writer behind the named transitions below."""
    cp._groups.clear()
    with cp._change():
        node = cp.store.update_node(name, changes)
        snode = cp.snap.nodes.get(name)
        if snode is not None:
            labels = "labels" in changes and cp.snap.levels  # a Ray node's topology labels may have changed
            cp.snap.update_node(name, passed=node.deep_health_check == DeepHealthCheck.PASSED,
                                  topology=cp.spec.node_topology(node.instance_group, name, node.labels)
                                  if labels else None)
            if snode.schedulable != node.schedulable:
                cp.snap.set_schedulable(name, node.schedulable and not admit.isolation_gap(cp))
    cp.wake.set()
    return node


def cordon(cp: CoreState, name: str, cordoned: bool = True) -> Node:
    """An admin takes the node out of placements (or gives it back: ``cordoned=False``)."""
    return _update_node(cp, name, {"cordoned": cordoned})


def quarantine(cp: CoreState, name: str, fault_type: str, reason: str) -> Node:
    """An admin (or a rule) suspects the node: no new work goes there, the jobs on it keep running, and its
    fault type and reason are shown (``node list``, metrics) until :func:`release`, a reboot or a replacement."""
    with cp._change():
        node = _update_node(cp, name, {"health_status": NodeHealth.QUARANTINED, "fault_type": fault_type,
                                        "fault_reason": reason, "last_check_at": cp.clock()})
        cp.event("NodeQuarantined", f"node {name} quarantined: {fault_type}: {reason} (no new work; its "
                   f"{len(cp.jobs_on(name))} job(s) keep running)", node=name, fault_type=fault_type)
    return node


def release(cp: CoreState, name: str) -> Node:
    """A quarantined node takes work again (a node in another state is left as it is)."""
    with cp._change():
        node = cp.store.get_node(name)
        if node is None or node.health_status != NodeHealth.QUARANTINED:
            return node
        node = _update_node(cp, name, {"health_status": NodeHealth.SCHEDULABLE, "fault_type": None,
                                        "fault_reason": None, "last_check_at": cp.clock()})
        cp.event("NodeReleased", f"node {name} released from quarantine", node=name)
    return node


def set_labels(cp: CoreState, name: str, labels: dict[str, Any]) -> Node:
    """The node's labels are now ``labels`` (injected faults, a GPU reading, a Ray node's topology)."""
    return _update_node(cp, name, {"labels": labels})


def check_started(cp: CoreState, name: str) -> None:
    """A deep health check of the node begins: out of placements until it ends."""
    _update_node(cp, name, {"deep_health_check": DeepHealthCheck.IN_PROGRESS,
                             "health_status": NodeHealth.UNSCHEDULABLE})
    set_schedulable(cp, name, False)


def check_passed(cp: CoreState, name: str, status: NodeHealth | None = None) -> None:
    """The deep health check passed: the node is back in service, or, given ``status`` (a reboot or a
    replacement was asked for), it keeps that status with the check passed."""
    if status is None:
        node_recovered(cp, name, passed=True)
    else:
        _update_node(cp, name, {"health_status": status, "deep_health_check": DeepHealthCheck.PASSED})


def check_failed(cp: CoreState, name: str, fault_type: str, reason: str, action: str) -> list[int]:
    """The deep health check failed: a fault (:func:`node_fault`) with the check recorded as failed."""
    stopped = node_fault(cp, name, fault_type, reason, action)
    _update_node(cp, name, {"deep_health_check": DeepHealthCheck.FAILED})
    return stopped


def check_reset(cp: CoreState, name: str) -> Node:
    """The node's deep health check is to be run again (a Ray node that came back)."""
    return _update_node(cp, name, {"deep_health_check": None})


def recovery_requested(cp: CoreState, name: str, action: str, status: NodeHealth) -> list[int]:
    """An admin asked for a reboot or a replacement: a fault whose jobs stop, the node waits in ``status``."""
    stopped = node_fault(cp, name, "ManualAction", f"{action} requested by an admin", action)
    _update_node(cp, name, {"health_status": status})
    return stopped


def restarted(cp: CoreState, name: str, labels: dict[str, Any]) -> Node:
    """The node was rebooted or replaced (``labels`` say which incarnation): it waits for its deep check."""
    return _update_node(cp, name, {"labels": labels, "health_status": NodeHealth.UNSCHEDULABLE,
                                    "deep_health_check": DeepHealthCheck.IN_PROGRESS})


def set_schedulable(cp: CoreState, node: str, schedulable: bool) -> None:
    """Take a node out of the engine's placements (or back) without changing the store (a deep health
    check under way)."""
    with cp.lock:
        if node in cp.snap.nodes:
            cp.snap.set_schedulable(node, schedulable and not admit.isolation_gap(cp))
    cp.wake.set()


def forget_node(cp: CoreState, name: str) -> None:
    """Delete a node that runs nothing from the store and the engine's view."""
    cp._groups.clear()
    with cp._change():
        cp.store.delete_node(name)
        if name in cp.snap.nodes:
            cp.snap.remove_node(name)


def remove_node(cp: CoreState, name: str, reason: str) -> None:
    """A node left for good: its jobs are handled as after a fault, then it is forgotten."""
    cp._groups.clear()
    with cp._change():
        node_fault(cp, name, "NodeLost", reason, "none")
        cp.event("NodeLeft", f"node {name} left: {reason}", node=name)
    cp.wake.set()


def node_fault(cp: CoreState, name: str, fault_type: str, reason: str, action: str) -> list[int]:
    """Take ``name`` out of service and stop its jobs; returns the ids of the jobs stopped. Those with
    auto-resume restart on healthy nodes (counting a retry), the others fail with the fault as reason."""
    stopped: list[int] = []
    with cp._change():
        node = cp.store.get_node(name)
        if node is None:
            return stopped
        _update_node(cp, name, {"health_status": ACTION_STATUS.get(action, NodeHealth.UNSCHEDULABLE),
                                "fault_type": fault_type, "fault_reason": reason, "last_check_at": cp.clock()})
        cp.event("NodeFault", f"node {name}: {fault_type}: {reason} (action: {action})", node=name,
                   fault_type=fault_type, action=action)
        why = f"node {name} fault: {fault_type}: {reason}"
        for jid, run in list(cp.runs.items()):
            job = cp.store.get_job(jid)
            if job is None or name not in job.placement or run.stopping is not None:
                continue
            if run.launched and restarts.node_lost(cp, job, run, name, why):
                continue  # that replica alone moves to another node (server/core/transitions/relocation.py)
            stop.begin_stop(cp, job, run, failure_kind(job), why)
            stopped.append(jid)
            if not run.launched:
                stop.stopped(cp, cp.store.get_job(jid) or job, run)
    cp.wake.set()
    return stopped


def node_recovered(cp: CoreState, name: str, passed: bool = True) -> None:
    """The node is healthy again (after a reboot, a replacement or by hand)."""
    with cp._change():
        _update_node(cp, name, {
            "health_status": NodeHealth.SCHEDULABLE, "fault_type": None, "fault_reason": None,
            "deep_health_check": DeepHealthCheck.PASSED if passed else DeepHealthCheck.FAILED,
            "last_check_at": cp.clock()})
        cp.event("NodeRecovered", f"node {name} is back in service", node=name)
    cp.wake.set()
