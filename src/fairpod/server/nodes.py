"""Nodes as the cluster spec defines them, and what a fault makes of a node.

A fault takes a node out of service (:meth:`fairpod.server.core.ControlPlane.node_fault`): it becomes
Unschedulable(PendingReboot|PendingReplacement), the jobs on it are stopped, and those with auto-resume restart
on healthy nodes (counting a retry) while the others fail with the fault as their reason. Recovery (by hand or
by ``fairpod.health``) puts it back.
"""

from __future__ import annotations

from fairpod.executors import registry
from fairpod.model.nodes import NodeHealth
from fairpod.model.spec import ClusterSpec
from fairpod.server.errors import WrongState
from fairpod.store import Store, Tx

# what a fault calls for -> the node's health status while it waits for that
ACTION_STATUS = {
    "reboot": NodeHealth.PENDING_REBOOT,
    "replace": NodeHealth.PENDING_REPLACEMENT,
    "none": NodeHealth.UNSCHEDULABLE,
}


# the labels a node's state is shown with (HyperPod's sagemaker.amazonaws.com/node-health-status, fault-types and
# fault-reasons): in node list, -o json (``status_labels``) and the metric fairpod_node_status
HEALTH_LABEL, FAULT_TYPE_LABEL, FAULT_REASON_LABEL = ("fairpod.io/node-health-status", "fairpod.io/fault-type",
                                                      "fairpod.io/fault-reason")


def status_labels(health_status: str, fault_type: str | None, fault_reason: str | None) -> dict[str, str]:
    """A node's state as labels: its health status, and its fault's type and reason when it has one."""
    out = {HEALTH_LABEL: health_status}
    if fault_type:
        out[FAULT_TYPE_LABEL] = fault_type
    if fault_reason:
        out[FAULT_REASON_LABEL] = fault_reason
    return out


def sync_nodes(store: Store | Tx, spec: ClusterSpec, busy: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Make the store's nodes match the spec's instance groups (``<group>-<i>``); busy nodes are kept.
    With an executor that has its own nodes (Ray) they come from its cluster (``fairpod.server.core.transitions.membership``), not the spec."""
    want: dict[str, tuple[str, str]] = {}
    from_executor = registry.nodes_from_executor(spec.cluster.executor.kind)
    for g in spec.cluster.instance_groups if not from_executor else []:
        for i in range(g.count):
            want[f"{g.name}-{i}"] = (g.name, g.node_type)
    have = {n.name: n for n in store.list_nodes()}
    own = registry.node_labels()  # nodes of an executor's own node table (Ray) are the executor's to drop
    for name, (group, itype) in want.items():
        if name not in have:
            store.add_node(name, group, itype)
        elif have[name].instance_type != itype:
            if name in busy:
                raise WrongState(f"node {name} runs jobs; it cannot change instance type now", "node busy")
            store.delete_node(name)
            store.add_node(name, group, itype)
    for name in have:
        if name not in want and name not in busy and not any(k in have[name].labels for k in own):
            store.delete_node(name)
