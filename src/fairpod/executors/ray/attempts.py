"""Attempts: their replicas, their launch on Ray, and their adoption after a restart of the control plane."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairpod.executors import state
from fairpod.executors.base import JobLaunch, ReplicaExit
from fairpod.executors.logs import output_end
from fairpod.executors.ray.agents import AGENT_PREFIX, _Agent
from fairpod.executors.ray.nodes import RayNode

log = logging.getLogger("fairpod.executors.ray")

RECORD = "ray.json"
STARTED = "started"  # in a replica's dir on the control plane: its agent said its command's process started


@dataclass(slots=True)
class _Rep:
    job: str
    attempt: int
    rank: int
    node: str
    node_id: str
    key: str  # run key on the node: <job>/<attempt>/<rank>-<run>
    dir: Path  # control-plane side
    agent: _Agent | None = None  # the node agent that runs it
    start_ref: Any = None
    started: float = 0.0  # monotonic: when the start was sent
    stop_ref: Any = None
    offset: int = 0  # bytes of the agent's log copied so far
    log_base: int = 0  # size of the copy when this run started (a relaunch appends to the same file)
    final: dict[str, Any] | None = None
    agent_final: bool = False  # the exit came from the agent (it still has its run dir to delete)
    stop_at: float | None = None  # monotonic
    stop_grace: float = 0.0
    running: bool = False  # its agent said its command's process started (``STARTED`` written)
    restarts: int = 0  # restarts in place of this rank in its attempt (this run's number)
    log_cap: int = 1 << 30  # the most the copy of its log holds (policy.log_max_bytes)
    ready: bool | None = None  # its last readiness probe on its node passed (``READY`` written; readycheck)


@dataclass(slots=True)
class _Attempt:
    job: str
    attempt: int
    created: float  # monotonic
    reps: list[_Rep] = field(default_factory=list)
    cleanup_refs: list[Any] | None = None
    cleanup_at: float | None = None
    cleaned: bool = False
    master_addr: str = ""  # the rendezvous address of the attempt (a restart in place gets it again)
    master_port: int = 0  # 0: not known yet (``port_ref`` is)
    port_ref: Any = None


class Attempts:
    """The part of :class:`~fairpod.executors.ray.executor.RayExecutor` that launches and adopts attempts."""

    _ray: Any
    _lock: threading.RLock
    _attempts: dict[tuple[str, int], _Attempt]
    _agents: dict[str, _Agent]
    _exits: list[ReplicaExit]
    root: Path
    namespace: str
    _finalize: Callable[[_Rep, dict[str, Any]], None]

    # -- launching -----------------------------------------------------------------------------------------
    def _start(self, job: JobLaunch, att: _Attempt, nodes: list[RayNode]) -> None:
        """Ask each node's agent to start its replica (no new Ray worker, no placement group)."""
        reps = sorted(job.replicas, key=lambda r: r.rank)
        record = {
            "job": job.job, "team": job.team, "attempt": job.attempt, "namespace": self.namespace,
            "launched_at": time.time(), "grace_seconds": job.grace_seconds, "master_addr": nodes[0].address,
            "replicas": [{"rank": r.rank, "node": r.node, "node_id": n.node_id, "key": rep.key,
                          "log_base": rep.log_base, "log_cap": job.log_max_bytes} for r, n, rep in zip(reps, nodes, att.reps, strict=True)],
        }  # fmt: skip
        state.write_json(self.root / job.job / str(job.attempt) / RECORD, record)  # before anything starts
        agents = [self._agents[n.node_id] for n in nodes]
        master_addr = nodes[0].address
        port_ref = agents[0].handle.free_port.remote(master_addr)
        att.master_addr, att.port_ref = master_addr, port_ref
        workdir = os.getcwd()
        now = time.monotonic()
        for rep, r, agent, n in zip(att.reps, reps, agents, nodes, strict=True):
            rep.agent = agent
            rep.started = now
            rep.start_ref = agent.handle.start.remote(rep.key, job, r, master_addr, port_ref, workdir, n.address)

    # -- start-up ------------------------------------------------------------------------------------------
    def _scan(self) -> None:
        """Re-attach to the replicas of the records not reported yet, through their nodes' agents; remove
        this namespace's actors (other than agents) and placement groups that no record names (left by older
        versions)."""
        ray = self._ray
        from ray.util.placement_group import PlacementGroup, placement_group_table, remove_placement_group

        with self._lock:
            for rec_path in sorted(self.root.glob(f"*/*/{RECORD}")):
                rec = state.read_json(rec_path)
                if rec is None or rec.get("namespace") != self.namespace:
                    continue
                job, attempt = str(rec.get("job")), int(rec.get("attempt", -1))
                if (job, attempt) in self._attempts:
                    continue
                adir = rec_path.parent
                reps = [_Rep(job, attempt, int(r["rank"]), str(r["node"]), str(r["node_id"]), str(r.get("key", "")),
                             adir / str(r["rank"]), log_base=int(r.get("log_base", 0)),
                             restarts=int(r.get("restarts", 0)), log_cap=int(r.get("log_cap", 1 << 30)))
                        for r in rec.get("replicas", [])]
                if not reps or all((r.dir / state.REPORTED).exists() for r in reps):
                    continue
                att = _Attempt(job, attempt, time.monotonic(), reps, master_addr=str(rec.get("master_addr", "")),
                               master_port=int(rec.get("master_port", 0)))
                grace = float(rec.get("grace_seconds", 30.0))
                for rep in reps:
                    rep.offset = max(0, output_end(rep.dir / state.OUTPUT) - rep.log_base)
                    st = state.read_json(rep.dir / state.STATUS)
                    if st is not None:
                        rep.final = st
                        if not (rep.dir / state.REPORTED).exists():
                            self._exits.append(state.exit_of(job, attempt, rep.rank, st))
                        continue
                    agent = self._agents.get(rep.node_id)
                    if rep.key and agent is not None and agent.ready and agent.lost is None:
                        rep.agent = agent
                        rep.stop_grace = grace
                    else:
                        self._finalize(rep, {"returncode": None, "signal": None, "reason": (
                            f"lost while the control plane was down: the fairpod agent of node {rep.node} is gone "
                            "(node lost?)")})
                self._attempts[(job, attempt)] = att
        for info in ray.util.list_named_actors(all_namespaces=True):
            name = str(info.get("name", ""))
            if info.get("namespace") == self.namespace and not name.startswith(AGENT_PREFIX):
                try:
                    ray.kill(ray.get_actor(name, namespace=self.namespace), no_restart=True)
                    log.warning("removed Ray actor %s: not a fairpod agent", name)
                except Exception:  # noqa: BLE001 - gone meanwhile
                    pass
        prefix = f"fairpod:{self.namespace}:"
        for pid, info in placement_group_table().items():
            if str(info.get("name", "")).startswith(prefix) and info.get("state") != "REMOVED":
                try:
                    remove_placement_group(PlacementGroup(ray._raylet.PlacementGroupID(bytes.fromhex(pid))))
                    log.warning("removed Ray placement group %s: fairpod uses none", info.get("name"))
                except Exception:  # noqa: BLE001 - removed meanwhile
                    pass
