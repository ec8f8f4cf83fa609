"""The transitions of a node: joined, cordoned, its labels, a deep health check started / passed / failed, a
fault, a recovery asked for, restarted, recovered, left. Each writes the store, then the engine's view of the
node, under the lock; :mod:`fairpod.health.manager`, :mod:`fairpod.server.core.transitions.membership` and the admin routes call
them by name."""

from __future__ import annotations

from typing import Any

from fairpod.model.nodes import DeepHealthCheck, NodeHealth
from fairpod.model.resources import node_res
from fairpod.server.core.transitions import restarts
from fairpod.server.nodes import ACTION_STATUS
from fairpod.server.runs import failure_kind
from fairpod.store.records import Node


class NodeTransitions:
    """The part of :class:`fairpod.server.core.ControlPlane` that changes nodes."""

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

    def _update_node(self, name: str, changes: dict[str, Any]) -> Node:
        """Change a node's stored fields (cordon, health status, deep health check, labels) and the engine's
        view of it (schedulable, passed) together: the one writer behind the named transitions below."""
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

    def cordon(self, name: str, cordoned: bool = True) -> Node:
        """An admin takes the node out of placements (or gives it back: ``cordoned=False``)."""
        return self._update_node(name, {"cordoned": cordoned})

    def quarantine(self, name: str, fault_type: str, reason: str) -> Node:
        """An admin (or a rule) suspects the node: no new work goes there, the jobs on it keep running, and its
        fault type and reason are shown (``node list``, metrics) until :meth:`release`, a reboot or a replacement."""
        with self._change():
            node = self._update_node(name, {"health_status": NodeHealth.QUARANTINED, "fault_type": fault_type,
                                            "fault_reason": reason, "last_check_at": self.clock()})
            self.event("NodeQuarantined", f"node {name} quarantined: {fault_type}: {reason} (no new work; its "
                       f"{len(self.jobs_on(name))} job(s) keep running)", node=name, fault_type=fault_type)
        return node

    def release(self, name: str) -> Node:
        """A quarantined node takes work again (a node in another state is left as it is)."""
        with self._change():
            node = self.store.get_node(name)
            if node is None or node.health_status != NodeHealth.QUARANTINED:
                return node
            node = self._update_node(name, {"health_status": NodeHealth.SCHEDULABLE, "fault_type": None,
                                            "fault_reason": None, "last_check_at": self.clock()})
            self.event("NodeReleased", f"node {name} released from quarantine", node=name)
        return node

    def set_labels(self, name: str, labels: dict[str, Any]) -> Node:
        """The node's labels are now ``labels`` (injected faults, a GPU reading, a Ray node's topology)."""
        return self._update_node(name, {"labels": labels})

    def check_started(self, name: str) -> None:
        """A deep health check of the node begins: out of placements until it ends."""
        self._update_node(name, {"deep_health_check": DeepHealthCheck.IN_PROGRESS,
                                 "health_status": NodeHealth.UNSCHEDULABLE})
        self.set_schedulable(name, False)

    def check_passed(self, name: str, status: NodeHealth | None = None) -> None:
        """The deep health check passed: the node is back in service, or, given ``status`` (a reboot or a
        replacement was asked for), it keeps that status with the check passed."""
        if status is None:
            self.node_recovered(name, passed=True)
        else:
            self._update_node(name, {"health_status": status, "deep_health_check": DeepHealthCheck.PASSED})

    def check_failed(self, name: str, fault_type: str, reason: str, action: str) -> list[int]:
        """The deep health check failed: a fault (:meth:`node_fault`) with the check recorded as failed."""
        stopped = self.node_fault(name, fault_type, reason, action)
        self._update_node(name, {"deep_health_check": DeepHealthCheck.FAILED})
        return stopped

    def check_reset(self, name: str) -> Node:
        """The node's deep health check is to be run again (a Ray node that came back)."""
        return self._update_node(name, {"deep_health_check": None})

    def recovery_requested(self, name: str, action: str, status: NodeHealth) -> list[int]:
        """An admin asked for a reboot or a replacement: a fault whose jobs stop, the node waits in ``status``."""
        stopped = self.node_fault(name, "ManualAction", f"{action} requested by an admin", action)
        self._update_node(name, {"health_status": status})
        return stopped

    def restarted(self, name: str, labels: dict[str, Any]) -> Node:
        """The node was rebooted or replaced (``labels`` say which incarnation): it waits for its deep check."""
        return self._update_node(name, {"labels": labels, "health_status": NodeHealth.UNSCHEDULABLE,
                                        "deep_health_check": DeepHealthCheck.IN_PROGRESS})

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
            self._update_node(name, {"health_status": ACTION_STATUS.get(action, NodeHealth.UNSCHEDULABLE),
                                    "fault_type": fault_type, "fault_reason": reason, "last_check_at": self.clock()})
            self.event("NodeFault", f"node {name}: {fault_type}: {reason} (action: {action})", node=name,
                       fault_type=fault_type, action=action)
            why = f"node {name} fault: {fault_type}: {reason}"
            for jid, run in list(self.runs.items()):
                job = self.store.get_job(jid)
                if job is None or name not in job.placement or run.stopping is not None:
                    continue
                if run.launched and restarts.node_lost(self, job, run, name, why):
                    continue  # that replica alone moves to another node (server/core/transitions/relocation.py)
                self.begin_stop(job, run, failure_kind(job), why)
                stopped.append(jid)
                if not run.launched:
                    self.stopped(self.store.get_job(jid) or job, run)
        self.wake.set()
        return stopped

    def node_recovered(self, name: str, passed: bool = True) -> None:
        """The node is healthy again (after a reboot, a replacement or by hand)."""
        with self._change():
            self._update_node(name, {
                "health_status": NodeHealth.SCHEDULABLE, "fault_type": None, "fault_reason": None,
                "deep_health_check": DeepHealthCheck.PASSED if passed else DeepHealthCheck.FAILED,
                "last_check_at": self.clock()})
            self.event("NodeRecovered", f"node {name} is back in service", node=name)
        self.wake.set()
