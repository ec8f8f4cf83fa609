"""Node membership and faults as the control plane sees them (mixed into ``ControlPlane``).

A fault takes a node out of service: it becomes Unschedulable(PendingReboot|PendingReplacement), the jobs on
it are stopped, and those with auto-resume restart on healthy nodes (counting a retry) while the others fail
with the fault as their reason. Recovery (by hand or by ``fairpod.health``) puts it back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fairpod.model.resources import node_res
from fairpod.server.runs import STOP_FAIL, STOP_RESTART
from fairpod.store import DeepHealthCheck, NodeHealth

if TYPE_CHECKING:
    from fairpod.server.control import ControlPlane

# what a fault calls for -> the node's health status while it waits for that
ACTION_STATUS = {
    "reboot": NodeHealth.PENDING_REBOOT,
    "replace": NodeHealth.PENDING_REPLACEMENT,
    "none": NodeHealth.UNSCHEDULABLE,
}


class NodeOps:
    def add_node(self: ControlPlane, name: str, group: str, itype: str, **fields: Any) -> None:
        """A node joined (e.g. a Ray node): store it and let the engine use it."""
        with self.lock:
            cat = self.spec.catalog()
            if itype not in cat:
                raise ValueError(f"node {name}: unknown instance type {itype!r}")
            node = self.store.get_node(name)
            if node is None:
                node = self.store.add_node(name, group, itype, **fields)
                self.event("NodeJoined", f"node {name} ({itype}) joined", node=name)
            if name not in self.snap.nodes:
                self.snap.add_node(name, itype, node_res(cat[itype]), schedulable=node.schedulable,
                                   passed=node.deep_health_check == DeepHealthCheck.PASSED)
        self.wake.set()

    def remove_node(self: ControlPlane, name: str, reason: str) -> None:
        """A node left for good: its jobs are handled as after a fault, then it is forgotten."""
        with self.lock:
            self.node_fault(name, "NodeLost", reason, "none")
            self.event("NodeLeft", f"node {name} left: {reason}", node=name)
        self.wake.set()

    def node_fault(self: ControlPlane, name: str, fault_type: str, reason: str, action: str) -> list[int]:
        """Take ``name`` out of service and stop its jobs; returns the ids of the jobs stopped."""
        stopped: list[int] = []
        with self.lock:
            node = self.store.get_node(name)
            if node is None:
                return stopped
            self.store.update_node(name, {"health_status": ACTION_STATUS.get(action, NodeHealth.UNSCHEDULABLE),
                                          "fault_type": fault_type, "fault_reason": reason,
                                          "last_check_at": self.clock()})
            if name in self.snap.nodes:
                self.snap.set_schedulable(name, False)
            self.event("NodeFault", f"node {name}: {fault_type}: {reason} (action: {action})", node=name,
                       fault_type=fault_type, action=action)
            why = f"node {name} fault: {fault_type}: {reason}"
            for jid, run in list(self.runs.items()):
                job = self.store.get_job(jid)
                if job is None or name not in job.placement or run.stopping is not None:
                    continue
                kind = STOP_RESTART if job.auto_resume and job.attempt < job.max_retry else STOP_FAIL
                self._begin_stop(job, run, kind, why)
                stopped.append(jid)
                if not run.launched:
                    self._stopped(self.store.get_job(jid) or job, run)
        self.wake.set()
        return stopped

    def node_recovered(self: ControlPlane, name: str, passed: bool = True) -> None:
        """The node is healthy again (after a reboot, a replacement or by hand)."""
        with self.lock:
            node = self.store.update_node(name, {
                "health_status": NodeHealth.SCHEDULABLE, "fault_type": None, "fault_reason": None,
                "deep_health_check": DeepHealthCheck.PASSED if passed else DeepHealthCheck.FAILED,
                "last_check_at": self.clock()})
            if name in self.snap.nodes:
                self.snap.nodes[name].health_passed = passed
                self.snap.set_schedulable(name, node.schedulable)
            self.event("NodeRecovered", f"node {name} is back in service", node=name)
        self.wake.set()

    def jobs_on(self: ControlPlane, name: str) -> list[int]:
        with self.lock:
            return [jid for jid, run in self.runs.items() if name in run.slots]


