"""Services (``JobSpec.service``): the core's part of replicas that run until deleted.

- **Ports**: each replica rank gets its own free port on its node, chosen once per attempt and kept with the run
  (``Run.ports``, index = rank); the launch carries them as ``FAIRPOD_SERVICE_PORTS`` and each replica sees its own
  as ``PORT`` (``executors.base.replica_env``).
- **Restart**: a replica of a running service that exits (any code) is started again on its own, the others
  keep serving: its slots go back, its rank is added again as a growth adds one (``Run.adding``, started by
  ``resize.grow_ready``), and its exit is known as ended (``Run.gone``) should it be delivered again.
- **Backoff**: a replica that keeps exiting (a crash loop) starts again later each time: after its k-th exit in a
  row it waits ``ServiceSpec.restart_delay(k)`` (``restart_backoff_seconds`` x 2^(k-1), at most
  ``restart_backoff_max_seconds``). The count and the time are kept with the run (``Run.crashes``), so they survive
  a restart of the control plane; its rank waits in ``Run.adding`` until then (``resize.grow_ready`` skips it).
  A replica ready ``restart_reset_seconds`` in a row has its count forgotten (``forget_exits``, asked by
  ``server.services``' probes).
- **Drain**: the replicas a shrink removes leave the service's endpoint list and get SIGTERM only after the
  service's drain period, one at a time (``server.services.Services.drain``, after the shrink is committed).

A service's size, its growth into borrowed capacity and its shrink on reclaim are those of an elastic job
(``nodes``..``max_nodes``, engine rule 11: replicas above the minimum are the first to go).
"""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING

from fairpod.executors.base import Executor, ReplicaExit, Traits
from fairpod.model.jobs import JobSpec, JobState
from fairpod.server.core.transitions import rayjobs
from fairpod.server.errors import InvalidJob
from fairpod.server.runs import Run, usage_message
from fairpod.store.records import Job

if TYPE_CHECKING:
    from fairpod.server.core.state import CoreState

log = logging.getLogger("fairpod.control")

PORTS_ENV = "FAIRPOD_SERVICE_PORTS"


def check(executor: Executor | Traits, spec: JobSpec) -> None:
    """InvalidJob if ``executor`` cannot run ``spec`` as a service."""
    can = Traits.of(executor)
    if spec.service is not None and spec.ray and spec.service.readiness_path:  # a command, run in each replica,
        # may say (a RayService's: Serve's applications RUNNING on the head, fairpod.executors.rayserve)
        raise InvalidJob("a Ray service (a standing Ray cluster) is ready when its Ray nodes answer on their ports "
                         "(or its readiness_command passes in the replica): give no readiness_path")
    if spec.service is not None and not can.resizing:
        raise InvalidJob(f"the {executor.name} executor cannot restart one replica of a running job; services "
                         "need the local executor")
    if spec.service is not None and spec.service.readiness_command and not can.probing:
        raise InvalidJob(f"the {executor.name} executor cannot run a readiness command in a replica's sandbox: "
                         "give service.readiness_path (HTTP) or neither (a TCP connect to PORT)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def service_env(cp: CoreState, job: Job, run: Run) -> dict[str, str]:
    """``FAIRPOD_SERVICE_PORTS`` of a service's launch (ports picked for ranks that have none yet)."""
    if job.spec.service is None:
        return {}
    most = max(job.spec.max_nodes or job.spec.nodes, len(job.placement))
    most += rayjobs.extra_ports(job)  # a Ray Serve service's head: its GCS on one more, the last
    while len(run.ports) < most:
        run.ports.append(free_port())
    if cp.services is not None:  # its replicas are probed from now on, also where no service ran before
        cp.services.poke()
    return {PORTS_ENV: ",".join(str(p) for p in run.ports)}


def replica_exited(cp: CoreState, job: Job, run: Run, e: ReplicaExit) -> None:
    """A replica of a running service ended on its own: it starts again, the others serve on."""
    rank = str(e.rank)
    if e.rank >= len(job.placement) or e.rank in run.adding:
        return
    node = job.placement[e.rank]
    cp.slots.give_back(node, run.slots.pop(node, []))
    run.gone[rank] = e.ended_at
    run.adding.append(e.rank)
    svc = job.spec.service
    assert svc is not None
    exits = int(run.crashes.get(rank, [0, 0.0])[0]) + 1
    wait = svc.restart_delay(exits)
    run.crashes[rank] = [exits, cp.clock() + wait]
    if use := run.record_usage(e.rank, e.cpu_seconds, e.memory_peak_bytes):
        cp.event("ReplicaUsage", usage_message(job.name, use), job, **use)
    cp._save_run(job, run)
    when = f"in {wait:g} s" if wait > 0 else "now"
    cp.event("ReplicaRestarting", f"service {job.name}: replica {e.rank} {e.reason}; it starts again {when} "
               f"(exit {exits} in a row)", job, rank=e.rank, reason=e.reason, exits=exits, delay=wait)
    cp.wake.set()


def forget_exits(cp: CoreState, jid: int, ranks: list[int]) -> None:
    """``ranks`` of service ``jid`` stayed ready ``restart_reset_seconds``: their exits in a row are forgotten."""
    with cp._change():
        run = cp.runs.get(jid)
        job = cp.store.get_job(jid)
        if run is None or job is None or job.state != JobState.RUNNING:
            return
        gone = [r for r in ranks if run.crashes.pop(str(r), None) is not None]
        if gone:
            cp._save_run(job, run)
            log.info("service %s: replicas %s ready long enough, their restart backoff starts over", job.name,
                     gone)


def drain_begun(cp: CoreState, jid: int, rank: int, until: float) -> None:
    """The drain of ``rank`` of service ``jid`` has begun; its SIGTERM is due at ``until`` (``Run.drain_until``,
    read again by a restarted control plane: ``server.services.Services._resume_drains``)."""
    with cp._change():
        run = cp.runs.get(jid)
        job = cp.store.get_job(jid)
        if run is None or job is None or str(rank) not in run.removing:
            return
        run.drain_until[str(rank)] = until
        cp._save_run(job, run)


def backing_off(run: Run, rank: int, now: float) -> bool:
    """Does ``rank`` of a service wait for its restart backoff (``Run.crashes``) at ``now``?"""
    c = run.crashes.get(str(rank))
    return c is not None and c[1] > now
