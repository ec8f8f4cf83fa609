"""Attempts: their replicas, their launch on Ray, and their adoption after a restart of the control plane."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairpod.executors import state
from fairpod.executors.base import ExecutorError, JobLaunch, ReplicaExit
from fairpod.executors.ray.nodes import NODE_ID_LABEL, RayNode

log = logging.getLogger("fairpod.executors.ray")

RECORD = "ray.json"


@dataclass(slots=True)
class _Rep:
    job: str
    attempt: int
    rank: int
    node: str
    node_id: str
    actor: str  # actor name in the namespace
    dir: Path  # control-plane side
    handle: Any = None
    start_ref: Any = None
    sync_ref: Any = None
    stop_ref: Any = None
    offset: int = 0  # bytes of the agent's log copied so far
    log_base: int = 0  # size of the copy when this run started (a relaunch appends to the same file)
    final: dict[str, Any] | None = None
    agent_final: bool = False  # the exit came from the agent (it still has its run dir to delete)
    stop_at: float | None = None  # monotonic
    stop_grace: float = 0.0
    unavailable_since: float | None = None


@dataclass(slots=True)
class _Attempt:
    job: str
    attempt: int
    pg_name: str
    pg: Any
    created: float  # monotonic
    reps: list[_Rep] = field(default_factory=list)
    cleanup_refs: list[Any] | None = None
    cleanup_at: float | None = None
    cleaned: bool = False



class Attempts:
    """The part of :class:`~fairpod.executors.ray.executor.RayExecutor` that launches and adopts attempts."""

    _ray: Any
    _lock: threading.RLock
    _attempts: dict[tuple[str, int], _Attempt]
    _agent_cls: Any
    root: Path
    namespace: str
    node_dir: str

    # -- launching -----------------------------------------------------------------------------------------
    def _start(self, job: JobLaunch, att: _Attempt, nodes: list[RayNode], run: str) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        reps = sorted(job.replicas, key=lambda r: r.rank)
        gpus = [len(r.accelerators) for r in reps]
        bundles = [{"GPU": float(g)} if g else {"CPU": 0.001} for g in gpus]
        record = {
            "job": job.job, "team": job.team, "attempt": job.attempt, "namespace": self.namespace,
            "placement_group": att.pg_name, "launched_at": time.time(), "grace_seconds": job.grace_seconds,
            "replicas": [{"rank": r.rank, "node": r.node, "node_id": n.node_id, "actor": rep.actor,
                          "log_base": rep.log_base} for r, n, rep in zip(reps, nodes, att.reps, strict=True)],
        }  # fmt: skip
        state.write_json(self.root / job.job / str(job.attempt) / RECORD, record)  # before anything exists in Ray
        att.pg = placement_group(bundles, strategy="STRICT_SPREAD", name=att.pg_name, lifetime="detached",
                                 bundle_label_selector=[{NODE_ID_LABEL: n.node_id} for n in nodes])
        for rep, g in zip(att.reps, gpus, strict=True):
            node_rdir = f"{self.node_dir}/{self.namespace}/{job.job}/{job.attempt}/{rep.rank}-{run}"
            rep.handle = self._agent_cls.options(
                name=rep.actor, namespace=self.namespace, lifetime="detached", max_concurrency=4, max_restarts=0,
                num_cpus=0, num_gpus=g,
                scheduling_strategy=PlacementGroupSchedulingStrategy(att.pg, placement_group_bundle_index=rep.rank),
            ).remote(node_rdir)  # fmt: skip
        master_addr = nodes[0].address
        port_ref = att.reps[0].handle.free_port.remote(master_addr)
        workdir = os.getcwd()
        for rep, r in zip(att.reps, reps, strict=True):
            rep.start_ref = rep.handle.start.remote(job, r, master_addr, port_ref, workdir)


    # -- start-up ------------------------------------------------------------------------------------------
    def _scan(self) -> None:
        """Re-attach to the agents of unreported replicas; remove this namespace's actors and placement groups
        that no record names."""
        ray = self._ray
        from ray.util.placement_group import PlacementGroup, placement_group_table

        pgs = {v.get("name"): (k, v) for k, v in placement_group_table().items() if v.get("name")}
        keep_actors: set[str] = set()
        keep_pgs: set[str] = set()
        with self._lock:
            for att in self._attempts.values():
                keep_actors.update(r.actor for r in att.reps)
                keep_pgs.add(att.pg_name)
            for rec_path in sorted(self.root.glob(f"*/*/{RECORD}")):
                rec = state.read_json(rec_path)
                if rec is None or rec.get("namespace") != self.namespace:
                    continue
                job, attempt = str(rec.get("job")), int(rec.get("attempt", -1))
                if (job, attempt) in self._attempts:
                    continue
                adir = rec_path.parent
                reps = [_Rep(job, attempt, int(r["rank"]), str(r["node"]), str(r["node_id"]), str(r["actor"]),
                             adir / str(r["rank"]), log_base=int(r.get("log_base", 0)))
                        for r in rec.get("replicas", [])]
                if not reps or all((r.dir / state.REPORTED).exists() for r in reps):
                    continue
                pg_name = str(rec.get("placement_group", ""))
                pg = None
                if pg_name in pgs and pgs[pg_name][1].get("state") != "REMOVED":
                    pg = PlacementGroup(ray._raylet.PlacementGroupID(bytes.fromhex(pgs[pg_name][0])))
                att = _Attempt(job, attempt, pg_name, pg, time.monotonic(), reps)
                grace = float(rec.get("grace_seconds", 30.0))
                for rep in reps:
                    size = (rep.dir / state.OUTPUT).stat().st_size if (rep.dir / state.OUTPUT).exists() else 0
                    rep.offset = max(0, size - rep.log_base)
                    st = state.read_json(rep.dir / state.STATUS)
                    reported = (rep.dir / state.REPORTED).exists()
                    if st is not None:
                        rep.final = st
                        if not reported:
                            self._exits.append(ReplicaExit(job=job, attempt=attempt, rank=rep.rank,
                                                           returncode=st.get("returncode"), signal=st.get("signal"),
                                                           reason=str(st.get("reason", "")),
                                                           ended_at=float(st.get("ended_at", 0.0))))
                        continue
                    try:
                        rep.handle = ray.get_actor(rep.actor, namespace=self.namespace)
                        rep.stop_grace = grace
                    except ValueError:
                        self._finalize(rep, {"returncode": None, "signal": None, "reason": (
                            "lost while the control plane was down: its Ray actor is gone (node lost?)")})
                self._attempts[(job, attempt)] = att
                keep_actors.update(r.actor for r in reps)
                keep_pgs.add(pg_name)
        for info in ray.util.list_named_actors(all_namespaces=True):
            if info.get("namespace") == self.namespace and info.get("name") not in keep_actors:
                try:
                    ray.kill(ray.get_actor(info["name"], namespace=self.namespace), no_restart=True)
                    log.warning("removed Ray actor %s: no fairpod record names it", info["name"])
                except Exception:  # noqa: BLE001 - gone meanwhile
                    pass
        prefix = f"fairpod:{self.namespace}:"
        for name, (pid, info) in pgs.items():
            if str(name).startswith(prefix) and name not in keep_pgs and info.get("state") != "REMOVED":
                self._remove_pg(PlacementGroup(ray._raylet.PlacementGroupID(bytes.fromhex(pid))))
                log.warning("removed Ray placement group %s: no fairpod record names it", name)

    # -- helpers -------------------------------------------------------------------------------------------
    @staticmethod
    def _validate(job: JobLaunch) -> None:
        if not state.NAME_RE.fullmatch(job.job) or ".." in job.job or ":" in job.job:
            raise ExecutorError(f"invalid job name {job.job!r}")
        if job.attempt < 0:
            raise ExecutorError(f"invalid attempt {job.attempt}")
        if not job.command or not all(isinstance(a, str) for a in job.command):
            raise ExecutorError(f"job {job.job} has no command")
        ranks = sorted(r.rank for r in job.replicas)
        if not ranks or ranks != list(range(len(ranks))):
            raise ExecutorError(f"job {job.job}: replica ranks must be 0..n-1, got {ranks}")
        if len({r.node for r in job.replicas}) != len(job.replicas):
            raise ExecutorError(f"job {job.job}: the Ray executor runs one replica per node")
        if job.grace_seconds < 0:
            raise ExecutorError(f"job {job.job}: negative grace period")


