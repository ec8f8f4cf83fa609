"""Node membership from the cluster the executor runs on (the Ray executor): joins, losses, departures.

:func:`sync` runs at the start of every turn of the control plane's loop. It does nothing unless the executor
has a node table (``cluster_nodes()``, see :class:`fairpod.executors.ray.RayExecutor`); otherwise it makes the
store and the engine's view follow that table:

- a live Ray node that names an instance type of the cluster spec's catalog, with at least that type's
  accelerators as GPUs, is a fairpod node (the row's ``group`` and ``store_labels``: instance group ``ray``, labels ``ray_node_id``,
  ``ray_address``, and
  its Ray labels named like the spec's ``topology_levels``, e.g. ``ray start --labels '{"rack": "r1"}'``);
  one that does not fit is left out, with a ``NodeIgnored`` event saying why;
- a node that dies is a node fault (``NodeLost``, or ``HeartbeatLost`` when Ray's health checks missed it): it
  becomes Unschedulable and its jobs stop, auto-resume jobs restarting elsewhere as after any fault
  (``Core.node_fault``); a node stopped on purpose (``ray stop``, scaled down) *left*.
  fairpod does not reboot or replace Ray nodes: Ray, its autoscaler or KubeRay does;
- a node that comes back under the same name (``ray start --node-name``) is recovered;
- a lost node that runs nothing is forgotten after :data:`FORGET_AFTER` seconds; a stored node that is not a
  Ray node at all (e.g. from the spec's ``instance_groups``) is dropped as soon as it runs nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

from fairpod.executors.base import NodeTable, capability
from fairpod.model.nodes import DeepHealthCheck
from fairpod.server.core.state import CoreState

log = logging.getLogger("fairpod.membership")

LOST = ("NodeLost", "HeartbeatLost")
FORGET_AFTER = 600.0
FULL_PASS_EVERY = 5.0  # seconds; sooner when the node table or the engine's node set changed


@dataclass
class _Memory:
    version: int = -1
    nodes: frozenset[str] = frozenset()
    at: float = 0.0
    ignored: dict[str, str] = field(default_factory=dict)  # Ray node id -> the problem reported


_MEMORY: WeakKeyDictionary[Any, _Memory] = WeakKeyDictionary()


def sync(cp: CoreState) -> None:
    """One membership pass (see the module doc); a no-op for executors without a node table."""
    table = capability(cp.executor, NodeTable)
    if table is None:
        return
    with cp.lock:
        mem = _MEMORY.setdefault(cp, _Memory())
        version = int(table.nodes_version)
        names = frozenset(cp.snap.nodes)
        now = time.monotonic()
        if version == mem.version and names == mem.nodes and now - mem.at < FULL_PASS_EVERY:
            return
        _sync(cp, table.cluster_nodes(), table.node_label, mem)
        mem.version, mem.nodes, mem.at = version, frozenset(cp.snap.nodes), now


def _busy(cp: CoreState, name: str) -> bool:
    node = cp.snap.nodes.get(name)
    return bool(cp.jobs_on(name)) or (node is not None and bool(node.jobs))


def _forget(cp: CoreState, name: str) -> None:
    cp.forget_node(name)


def _sync(cp: CoreState, nodes: list[Any], node_label: str, mem: _Memory) -> None:
    cat = cp.spec.catalog()
    stored = {n.name: n for n in cp.store.list_nodes()}
    by_name = {rn.name: rn for rn in nodes}
    live: dict[str, Any] = {}
    for rn in nodes:
        if not rn.alive or rn.instance_type is None:
            continue
        problem = rn.problem
        itype = cat.get(rn.instance_type)
        if problem is None and itype is None:
            problem = f"unknown instance type {rn.instance_type!r} (define it under instance_types in the cluster spec)"
        elif problem is None and itype is not None and rn.gpus < itype.accelerators:
            problem = f"it has {rn.gpus:g} GPUs and {rn.instance_type} has {itype.accelerators}"
        if problem is not None:
            if mem.ignored.get(rn.node_id) != problem:
                mem.ignored[rn.node_id] = problem
                log.warning("Ray node %s is not used: %s", rn.name, problem)
                cp.event("NodeIgnored", f"Ray node {rn.name} is not used: {problem}", node=rn.name)
            continue
        mem.ignored.pop(rn.node_id, None)
        live[rn.name] = rn

    for name, rn in live.items():
        node = stored.get(name)
        labels = dict(rn.store_labels)
        own = dict(getattr(rn, "labels", ()))
        labels.update({lv: own[lv] for lv in cp.spec.cluster.topology_levels if lv in own})  # its topology
        if node is not None and node.instance_type != rn.instance_type:
            if _busy(cp, name):
                continue  # the old node's jobs are still stopping
            _forget(cp, name)
            node = None
        if node is None:
            cp.add_node(name, rn.group, rn.instance_type, labels=labels)
            continue
        if any(node.labels.get(k) != v for k, v in labels.items()):
            cp.set_labels(name, {**node.labels, **labels})
        if node.fault_type in LOST:
            before = node.deep_health_check
            cp.node_recovered(name, passed=before == DeepHealthCheck.PASSED)
            if before is None:  # never checked: recovery is no health check
                cp.check_reset(name)
        elif name not in cp.snap.nodes:
            cp.add_node(name, node.instance_group, node.instance_type)  # back into the engine's view

    now = cp.clock()
    for name, node in stored.items():
        if name in live:
            continue
        rid = node.labels.get(node_label)
        if rid is None:  # not a node of the Ray cluster
            if not _busy(cp, name):
                log.info("node %s is not a node of the Ray cluster: dropped", name)
                _forget(cp, name)
            elif node.fault_type not in LOST:
                cp.node_fault(name, "NodeLost", "not a node of the Ray cluster", "none")
            continue
        if node.fault_type not in LOST:
            rn = by_name.get(name)
            if rn is not None and rn.alive:
                cp.node_fault(name, "NodeLost", f"Ray node no longer usable: {mem.ignored.get(rn.node_id)}", "none")
            elif rn is not None and rn.expected_death:
                cp.remove_node(name, f"Ray node stopped: {rn.death}")
            else:
                death = rn.death if rn is not None and rn.death else "it left the Ray cluster"
                kind = "HeartbeatLost" if "heartbeat" in death.lower() or "health check" in death.lower() else "NodeLost"
                cp.node_fault(name, kind, f"Ray node lost: {death}", "none")  # Ray (or its autoscaler) replaces
            continue
        if not _busy(cp, name) and now - (node.last_check_at or 0.0) >= FORGET_AFTER:
            log.info("node %s has been lost for %.0f s and runs nothing: forgotten", name, FORGET_AFTER)
            cp.event("NodeForgotten", f"node {name} is forgotten: lost for {FORGET_AFTER:g} s", node=name)
            _forget(cp, name)
