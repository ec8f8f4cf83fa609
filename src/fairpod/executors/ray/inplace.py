"""The Ray executor's part for resilience (capabilities ``Starting`` and ``RestartingInPlace`` of
:mod:`fairpod.executors.base`): which replicas of an attempt have really started their process on their node
(gang readiness, ``server/core/transitions/readiness.py``), and the restart of a failed replica in place (``server/core/transitions/restarts.py``).

Started: a replica's node agent says so in its answer to ``sync`` once the replica's supervisor has started the
command (``child.pid`` on the node); the pump then writes ``started`` in the replica's dir on the control plane.
A launch that is recorded, or a start call that has reached the agent, is not enough: the agent may not have
forked the supervisor yet, or the supervisor the command (a slow node, a fork server that does not answer).

Restart in place: the rank is started again by the same node agent (same Ray node, same accelerator slots, the
environment of the launch the control plane gives, with the attempt's ``MASTER_ADDR``/``MASTER_PORT``) under a
new run key, so nothing of its previous run on the node is reused; its output is appended to the same log on
the control plane. The attempt's other replicas are not touched. The attempt's record (``ray.json``) names the
new run key, so a restarted control plane re-attaches to it.

On another node (capability ``Relocating``: its node failed, ``server/core/transitions/relocation.py``): the same,
by the agent of the node the launch names, its node and Ray node id written in the record with the run key. The
replica left its old node first (``stop_replicas``; a node that is gone ends it as lost). Rank 0 does not move:
``MASTER_ADDR`` is its node's address, which the other replicas keep, so a move of rank 0 is refused and the job
restarts whole.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fairpod.executors import readycheck, state
from fairpod.executors.base import ExecutorError, JobLaunch
from fairpod.executors.logs import output_end
from fairpod.executors.ray.agents import _Agent
from fairpod.executors.ray.attempts import RECORD, STARTED, _Attempt, _Rep
from fairpod.executors.ray.nodes import RayNode


class InPlace:
    """Mixed into :class:`fairpod.executors.ray.executor.RayExecutor`."""

    _lock: threading.RLock
    _attempts: dict[tuple[str, int], _Attempt]
    _agents: dict[str, _Agent]
    _by_name: dict[str, RayNode]
    _wake: threading.Event
    root: Path
    namespace: str

    def probed_ready(self, job: str, attempt: int) -> set[int]:
        """Ranks of the attempt whose last readiness probe, run on its node in its sandbox, passed (as the
        node agent's ``sync`` said)."""
        if not state.NAME_RE.fullmatch(job):
            return set()
        return readycheck.ready_ranks(self.root / job / str(attempt))

    def started_ranks(self, job: str, attempt: int) -> set[int]:
        """Ranks of the attempt whose command's process was started on its node (or that ended since)."""
        if not state.NAME_RE.fullmatch(job):
            return set()
        adir = self.root / job / str(attempt)
        try:
            dirs = [d for d in adir.iterdir() if d.name.isdigit()]
        except OSError:
            return set()
        return {int(d.name) for d in dirs
                if any((d / name).exists() for name in (STARTED, state.STATUS, state.REPORTED))}

    def restart_replicas(self, job: JobLaunch) -> None:
        """Start ``job.replicas`` (ended ranks of the live attempt ``job.attempt``, their exits acknowledged) again
        on the nodes their launch names (their own, or another when theirs failed: ``Relocating``) through those
        nodes' agents, with the attempt's rendezvous address; the attempt's other
        replicas are not touched. A rank already running its restart number ``FAIRPOD_REPLICA_RESTARTS`` (the
        control plane stopped between this call and its record of it) is left as it is. Raises
        :class:`ExecutorError` (the control plane then restarts the job whole)."""
        if not state.NAME_RE.fullmatch(job.job) or (not job.command and not job.container) or not job.replicas:
            raise ExecutorError(f"job {job.job}: nothing to restart")
        ranks = sorted(r.rank for r in job.replicas)
        wanted = int(job.env.get("FAIRPOD_REPLICA_RESTARTS", "0") or 0)
        with self._lock:
            att = self._attempts.get((job.job, job.attempt)) or self._revive(job.job, job.attempt)
            if att is None:
                raise ExecutorError(f"job {job.job} attempt {job.attempt} is not known to the Ray executor")
            by_rank = {r.rank: r for r in att.reps}
            todo = []
            for launch in sorted(job.replicas, key=lambda r: r.rank):
                old = by_rank.get(launch.rank)
                if old is None:
                    raise ExecutorError(f"job {job.job} attempt {job.attempt} has no replica {launch.rank}")
                if old.final is None and 0 < wanted <= old.restarts:
                    continue  # started already
                if old.final is None or not (old.dir / state.REPORTED).exists():
                    raise ExecutorError(f"job {job.job}: ranks {ranks} have not ended (or their exits are not "
                                        "acknowledged yet)")
                moved = launch.node != old.node
                if moved and (no := self.cannot_relocate(launch.rank)) is not None:
                    raise ExecutorError(f"job {job.job}: replica {launch.rank} cannot leave node {old.node}: {no}")
                rn = self._by_name.get(launch.node)
                agent = self._agents.get(rn.node_id) if rn is not None else None
                if (rn is None or (not moved and rn.node_id != old.node_id) or not rn.alive or agent is None
                        or not agent.ready or agent.lost is not None):
                    raise ExecutorError(f"job {job.job}: node {launch.node} of replica {launch.rank} is not usable "
                                        f"({rn.death if rn is not None and rn.death else 'its agent is not live'})")
                todo.append((launch, old, agent, rn))
            port: Any = att.master_port or att.port_ref
            if todo and (not att.master_addr or not port):
                raise ExecutorError(f"job {job.job}: the rendezvous address of attempt {job.attempt} is not known")
            run = uuid.uuid4().hex[:8]
            now = time.monotonic()
            new = {launch.rank: _Rep(job.job, job.attempt, launch.rank, rn.name, rn.node_id,
                                     f"{job.job}/{job.attempt}/{launch.rank}-{run}", old.dir, agent=agent,
                                     log_base=output_end(old.dir / state.OUTPUT), log_cap=old.log_cap,
                                     started=now, stop_grace=job.grace_seconds, restarts=old.restarts + 1)
                   for launch, old, agent, rn in todo}
            self._record(att, new)  # first: a control plane that stops from here on re-attaches to the new runs
            for launch, old, agent, rn in todo:
                rep = new[launch.rank]
                for name in (state.STATUS, state.REPORTED, STARTED, state.READY):
                    (old.dir / name).unlink(missing_ok=True)
                (old.dir / state.OUTPUT).touch()
                was = old.agent
                if old.agent_final and was is not None and was is self._agents.get(old.node_id) and was.lost is None:
                    was.handle.finish.remote([old.key])  # the control plane has all of the old run
                att.reps[att.reps.index(old)] = rep
                rep.start_ref = agent.handle.start.remote(rep.key, job, launch, att.master_addr, port, os.getcwd(),
                                                          rn.address)
            if todo:
                att.cleaned, att.cleanup_refs, att.cleanup_at = False, None, None
        self._wake.set()

    def cannot_relocate(self, rank: int) -> str | None:
        """Capability ``Relocating``: every rank but 0 may restart on another node (see the module doc)."""
        if rank == 0:
            return ("replica 0 hosts the job's rendezvous (MASTER_ADDR is its node's address, which the other "
                    "replicas keep), so on Ray it restarts only on its own node")
        return None

    def stop_replicas(self, job: str, attempt: int, ranks: Sequence[int], grace_seconds: float) -> None:
        """Begin a graceful stop of those ranks of the attempt (a replica whose node failed); the others keep
        running. A replica whose node or agent is gone ends as lost (the pump sees it)."""
        with self._lock:
            att = self._attempts.get((job, attempt))
            if att is None:
                return
            now = time.monotonic()
            for rep in att.reps:
                if rep.rank not in ranks or rep.final is not None:
                    continue
                grace = max(0.0, grace_seconds)
                rep.stop_grace = grace if rep.stop_at is None else min(rep.stop_grace, grace)
                rep.stop_at = rep.stop_at or now
                if rep.agent is not None and rep.agent.lost is None and rep.start_ref is None:
                    rep.stop_ref = rep.agent.handle.stop.remote(rep.key, rep.stop_grace)
        self._wake.set()

    def replica_ranks(self, job: str, attempt: int) -> set[int]:
        """Ranks of the attempt known here: running, or ended with an exit not acknowledged yet."""
        with self._lock:
            att = self._attempts.get((job, attempt))
            return set() if att is None else {r.rank for r in att.reps
                                              if r.final is None or not (r.dir / state.REPORTED).exists()}

    # -- helpers -------------------------------------------------------------------------------------------
    def _revive(self, job: str, attempt: int) -> _Attempt | None:
        """An attempt every replica of which had ended and been reported (so forgotten), from its record."""
        rec = state.read_json(self.root / job / str(attempt) / RECORD)
        if rec is None or rec.get("namespace") != self.namespace or not rec.get("replicas"):
            return None
        adir = self.root / job / str(attempt)
        reps = [_Rep(job, attempt, int(r["rank"]), str(r["node"]), str(r["node_id"]), str(r.get("key", "")),
                     adir / str(r["rank"]), log_base=int(r.get("log_base", 0)), restarts=int(r.get("restarts", 0)),
                     stop_grace=float(rec.get("grace_seconds", 30.0))) for r in rec["replicas"]]
        for rep in reps:
            rep.final = state.read_json(rep.dir / state.STATUS)
            if rep.final is None:
                return None  # not all ended: then it would be known
        att = _Attempt(job, attempt, time.monotonic(), reps, cleaned=True, master_addr=str(rec.get("master_addr", "")),
                       master_port=int(rec.get("master_port", 0)))
        self._attempts[(job, attempt)] = att
        return att

    def _record(self, att: _Attempt, reps: dict[int, _Rep]) -> None:
        """The attempt's record names the new runs of restarted ranks (a restarted control plane finds them)."""
        path = self.root / att.job / str(att.attempt) / RECORD
        rec = state.read_json(path)
        if rec is None or not reps:
            return
        for r in rec.get("replicas", []):
            rep = reps.get(int(r["rank"]))
            if rep is not None:
                r.update(key=rep.key, log_base=rep.log_base, restarts=rep.restarts, node=rep.node,
                         node_id=rep.node_id)
        state.write_json(path, rec)
