"""Runs node health inside the control plane: the monitoring agent for every node, deep health checks
(when a node joins, after a reboot or replacement, on demand) and recovery.

Recovery (``cluster.node_recovery``): with Automatic, a node in UnschedulablePendingReboot is rebooted
once its jobs have stopped (for a virtual node: its faults that a reboot clears are gone, it is down for
``reboot_seconds``), then its deep checks run again; a node in UnschedulablePendingReplacement is retired and
a fresh one of the same type takes its name (its ``incarnation`` label counts up), then checked. A node that
passes goes back into service; one that fails again is marked for replacement. With None, faults only label
the node; ``fairpod node reboot|replace`` does the same by hand either way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Protocol

from fairpod.executors.base import NodeRunner
from fairpod.health import checks
from fairpod.health.agent import DEEP_CHECK_ACTION, Finding, agent_check
from fairpod.health.probe import CLEARED_BY_REBOOT, FAULT_KINDS, Faulty, Probe
from fairpod.health.remote import monitor_on_node, stress_on_node
from fairpod.model.catalog import GENERIC_GPU, gpu_thresholds
from fairpod.model.nodes import NodeHealth
from fairpod.model.spec import ClusterSpec, NodeRecovery

log = logging.getLogger("fairpod.health")


class NodeOwner(Protocol):
    """What node health uses of the control plane (``fairpod.server.core.ControlPlane`` is one): it reads
    nodes from the store (``queries``) and changes them only through these transitions, each of which takes the core's lock."""

    queries: Any  # the store, read only (fairpod.server.core.queries.Queries): get_node, list_nodes
    executor: Any  # fairpod.executors.base.Executor (a NodeRunner runs checks on their node)
    spec: ClusterSpec
    home: Path

    def event(self, kind: str, msg: str, job: Any = None, /, **data: Any) -> None: ...

    def node_event(self, node: str, kind: str, msg: str, data: dict[str, Any]) -> None: ...

    def set_labels(self, name: str, labels: dict[str, Any]) -> Any: ...

    def check_started(self, name: str) -> None: ...

    def check_passed(self, name: str, status: NodeHealth | None = None) -> None: ...

    def check_failed(self, name: str, fault_type: str, reason: str, action: str) -> list[int]: ...

    def recovery_requested(self, name: str, action: str, status: NodeHealth) -> list[int]: ...

    def restarted(self, name: str, labels: dict[str, Any]) -> Any: ...

    def node_fault(self, name: str, fault_type: str, reason: str, action: str) -> list[int]: ...

    def jobs_on(self, name: str) -> list[int]: ...

    def database_lost(self, e: BaseException) -> bool:
        """True when ``e`` came of a database that cannot be reached (said once by the core, not per round)."""
        ...


class HealthManager:
    def __init__(self, cp: NodeOwner, *, interval: float = 10.0, reboot_seconds: float = 2.0,
                 heartbeat_timeout: float | None = None, stress_seconds: float = 2.0) -> None:
        self.cp = cp
        self.interval = interval
        self.reboot_seconds = reboot_seconds
        self.heartbeat_timeout = heartbeat_timeout or 3 * interval
        self.stress_seconds = stress_seconds
        self.heartbeats: dict[str, float] = {}
        self.checks: deque[tuple[str, str]] = deque()
        self.recover: dict[str, str] = {}  # node -> reboot | replace, asked for by hand
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._kinds: dict[tuple[str, str], tuple[int, bool, Any]] = {}  # (type, group) -> what a probe expects
        self._kinds_of: object = None  # the spec they were worked out under
        self._thread: threading.Thread | None = None
        self.scratch = str(cp.home)

    # -- requests (API threads) ----------------------------------------------------------------
    def inject(self, node: str, kind: str) -> None:
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r} ({', '.join(FAULT_KINDS)})")
        nd = self.cp.queries.get_node(node)
        if nd is None:
            raise KeyError(node)
        faults = sorted(set(nd.labels.get("injected_faults", [])) | {kind})
        self.cp.set_labels(node, {**nd.labels, "injected_faults": faults})
        self.cp.event("FaultInjected", f"node {node}: fault {kind} injected", node=node, kind=kind)
        self._wake.set()

    def request_check(self, node: str, why: str = "on demand") -> None:
        with self._lock:
            self.checks.append((node, why))
        self._wake.set()

    def request_recovery(self, node: str, action: str) -> None:
        with self._lock:
            self.recover[node] = action
        status = NodeHealth.PENDING_REBOOT if action == "reboot" else NodeHealth.PENDING_REPLACEMENT
        self.cp.recovery_requested(node, action, status)
        self._wake.set()

    # -- the loop ------------------------------------------------------------------------------
    def start(self) -> None:
        for nd in self.cp.queries.list_nodes():
            if self._configured_checks(nd.instance_group) and nd.deep_health_check is None:
                self.request_check(nd.name, "node joined")
        self._thread = threading.Thread(target=self._loop, name="fairpod-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        next_agent = 0.0
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                if now >= next_agent:
                    self.agent_round()
                    next_agent = now + self.interval
                self.recovery_round()
                self.check_round()
            except Exception as e:
                if not self.cp.database_lost(e):
                    log.exception("health loop failed; retrying")
            self._wake.wait(min(self.interval, 0.5))
            self._wake.clear()

    def probe(self, node: str, nd: Any = None) -> Probe:
        """The node's probe; ``nd``: its record when the caller has just read it."""
        nd = nd if nd is not None else self.cp.queries.get_node(node)
        acc, real, th = self._kind(nd.instance_type, nd.instance_group) if nd else (0, False, GENERIC_GPU)
        base = Probe(node, self.scratch, acc, virtual_gpus=not real, thresholds=th)
        faults = set(nd.labels.get("injected_faults", [])) if nd else set()
        return Faulty(base, faults) if faults else base

    def _kind(self, instance_type: str, instance_group: str) -> tuple[int, bool, Any]:
        """(GPUs expected, whether they are real, their thresholds) of a node of ``instance_type`` in
        ``instance_group`` under the spec now: the same for every node of a group, so worked out once per spec
        (the agents' round probes every node: 10,000 every 10 s at datacenter size)."""
        spec = self.cp.spec
        if spec is not self._kinds_of:
            self._kinds, self._kinds_of = {}, spec
        got = self._kinds.get((instance_type, instance_group))
        if got is None:
            cat = spec.catalog()
            itype = cat.get(instance_type)
            acc = itype.accelerators if itype else 0
            group = next((g for g in spec.cluster.instance_groups if g.name == instance_group), None)
            real = group is not None and group.accelerators_are == "gpus"
            if group is not None and group.accelerator_partition_type and group.instance_type in cat:
                itype = cat[group.instance_type]  # MIG partitions: the node still has its GPUs
                acc = itype.accelerators
            th = (group.gpu_thresholds if group and group.gpu_thresholds
                  else gpu_thresholds(itype.accelerator_kind or "") if itype else GENERIC_GPU)
            got = self._kinds[(instance_type, instance_group)] = (acc, real, th)
        return got

    def agent_round(self) -> None:
        now = time.time()
        runner = self.cp.executor if isinstance(self.cp.executor, NodeRunner) else None
        for nd in self.cp.queries.list_nodes(health_status=NodeHealth.SCHEDULABLE):
            probe = self.probe(nd.name, nd)
            if runner is not None:
                findings = self._monitor_on_node(runner, nd.name, probe, now)
            else:
                if not probe.heartbeat_stopped:  # the node's agent reports in
                    self.heartbeats[nd.name] = now
                findings = agent_check(probe, self.heartbeats.get(nd.name), now, self.heartbeat_timeout)
            for f in findings:
                if f.action == "none":
                    self.cp.event(f.condition, f"node {nd.name}: {f.msg}", node=nd.name, **f.values)
                    continue
                self.cp.node_fault(nd.name, f.condition, f.msg, f.action)
                break

    def _monitor_on_node(self, runner: NodeRunner, node: str, probe: Probe, now: float) -> list[Finding]:
        """The monitoring agent's checks on the node itself (Ray: in its agent). A node that cannot be reached
        reports nothing here: its executor makes that a node fault."""
        faults = sorted(probe.kinds) if isinstance(probe, Faulty) else []
        try:
            beat, findings = runner.run_on_node(node, monitor_on_node, node, probe.expected_gpus, probe.virtual_gpus,
                                                probe.thresholds, faults, self.heartbeats.get(node), now,
                                                self.heartbeat_timeout, timeout=10.0)
        except Exception as e:  # noqa: BLE001 - unreachable: the executor's own fault
            log.warning("node %s: the monitoring checks could not run there: %s", node, e)
            return []
        if beat:
            self.heartbeats[node] = now
        return findings

    def recovery_round(self) -> None:
        automatic = self.cp.spec.cluster.node_recovery == NodeRecovery.AUTOMATIC
        pending = (NodeHealth.PENDING_REBOOT, NodeHealth.PENDING_REPLACEMENT)
        for nd in self.cp.queries.list_nodes(health_status=pending):  # (read every 0.5 s: only those that wait)
            if nd.health_status == NodeHealth.PENDING_REBOOT:
                action = "reboot"
            elif nd.health_status == NodeHealth.PENDING_REPLACEMENT:
                action = "replace"
            else:
                continue
            with self._lock:
                manual = self.recover.get(nd.name) == action
            if not (automatic or manual) or self.cp.jobs_on(nd.name):
                continue  # labels only, or wait until its jobs have stopped
            with self._lock:
                self.recover.pop(nd.name, None)
            self._carry_out(nd.name, action, nd.labels)

    def _carry_out(self, node: str, action: str, labels: dict[str, Any]) -> None:
        faults = set(labels.get("injected_faults", []))
        if action == "reboot":
            self.cp.event("NodeRebooting", f"node {node} is rebooting", node=node)
            time.sleep(self.reboot_seconds)  # the node is down
            left = sorted(faults - CLEARED_BY_REBOOT)
            new_labels = {**labels, "injected_faults": left}
            self.cp.event("NodeRebooted", f"node {node} rebooted", node=node)
        else:
            inc = int(labels.get("incarnation", 0)) + 1
            new_labels = {**labels, "injected_faults": [], "incarnation": inc}
            self.cp.event("NodeReplaced", f"node {node} retired; a fresh {node} (incarnation {inc}) replaces it",
                          node=node, incarnation=inc)
        self.heartbeats.pop(node, None)
        self.cp.restarted(node, new_labels)
        self.request_check(node, f"after {action}")

    def _configured_checks(self, group: str) -> list[str]:
        for g in self.cp.spec.cluster.instance_groups:
            if g.name == group:
                return list(g.deep_health_checks)
        return []

    def check_round(self) -> None:
        while True:
            with self._lock:
                if not self.checks:
                    return
                node, why = self.checks.popleft()
            self.deep_check(node, why)

    def _stress(self, node: str, probe: Probe) -> checks.CheckResult:
        """InstanceStress on the node itself when the executor can run code there (Ray), else here; a node
        whose executor cannot reach it fails the check."""
        ex = self.cp.executor
        if not isinstance(ex, NodeRunner):
            return checks.instance_stress(probe, seconds=self.stress_seconds)
        faults = sorted(probe.kinds) if isinstance(probe, Faulty) else []
        try:
            return ex.run_on_node(node, stress_on_node, node, probe.expected_gpus, probe.virtual_gpus, faults,
                                  self.stress_seconds, timeout=60 + 5 * self.stress_seconds)
        except Exception as e:  # noqa: BLE001 - the node did not answer: that is the check's result
            why = (str(e).strip().splitlines() or [type(e).__name__])[0]
            r = checks.CheckResult("InstanceStress", node, True)
            r.fail("StressTestFailed", f"the check could not run on the node: {why}")
            return r

    def deep_check(self, node: str, why: str) -> bool:
        nd = self.cp.queries.get_node(node)
        if nd is None:
            return False
        names = self._configured_checks(nd.instance_group) or ["InstanceStress"]
        before = nd.health_status
        self.cp.check_started(node)
        self.cp.event("DeepHealthCheckStarted", f"node {node}: deep health checks {', '.join(names)} ({why})",
                      node=node)
        results: list[checks.CheckResult] = []
        probe = self.probe(node)
        if "InstanceStress" in names:
            results.append(self._stress(node, probe))
        if "InstanceConnectivity" in names:
            peers = [n.name for n in self.cp.queries.list_nodes(instance_group=nd.instance_group)
                     if n.name == node or n.schedulable]
            conn = next((g.connectivity for g in self.cp.spec.cluster.instance_groups
                         if g.name == nd.instance_group), None)
            kw: dict[str, Any] = {"min_mib_per_s": conn.min_mib_per_s, "max_latency_ms": conn.max_latency_ms} if conn else {}
            results += [r for r in checks.instance_connectivity(peers, **kw) if r.node == node]
        for r in results:
            for e in r.events:
                self.cp.node_event(node, "HealthCheck", e["msg"], e)
        readings = [e["reading"] for r in results for e in r.events if e.get("reading", {}).get("source") != "virtual"
                    and "reading" in e]
        if readings and (now_nd := self.cp.queries.get_node(node)) is not None:  # what `node list` shows
            gpu = {"model": readings[0].get("name"), "memory_mib": readings[0].get("memory_mib"),
                   "count": len(readings), "source": readings[0].get("source")}
            self.cp.set_labels(node, {**now_nd.labels, "gpu": gpu})
        failed = [r for r in results if not r.passed]
        if not failed:
            if before in (NodeHealth.PENDING_REBOOT, NodeHealth.PENDING_REPLACEMENT) and why == "on demand":
                self.cp.check_passed(node, before)
                return True
            self.cp.check_passed(node)
            return True
        fault = failed[0].fault_type or "DeepHealthCheckFailed"
        action = DEEP_CHECK_ACTION.get(fault, "replace")
        msg = "; ".join(e["msg"] for r in failed for e in r.events if e["level"] == "error")
        self.cp.check_failed(node, fault, f"deep health check failed: {msg}", action)
        return False
