"""Ray jobs (``JobSpec.ray``): a private Ray cluster per job, started inside the job's replicas.

A Ray job is admitted, placed, preempted and resumed as one gang like any job; only its launch differs: every
replica runs ``python -m fairpod.executors.raycluster -- COMMAND`` (the head on rank 0, a worker on each other
rank, the entrypoint ``COMMAND`` on rank 0 against it) and gets its vCPUs and memory in ``FAIRPOD_VCPU_MILLI`` and
``FAIRPOD_MEMORY_MIB`` so that its Ray node offers exactly what the engine gave it (docs/workloads.md). A Ray
job that is a service (a KubeRay RayCluster) is a standing cluster: ``FAIRPOD_RAY_STANDING=1``, its command (often
none) run once against it, the cluster kept until the service is deleted, each replica's Ray node on its service
port (the head's GCS on rank 0's), each replica ready while its Ray node is ALIVE in the head's node table (the
readiness command ``model.services.RAY_NODE_READY`` tests a file the launcher keeps while it is). A Ray service
that serves (a KubeRay RayService: ``FAIRPOD_RAY_SERVE``, fairpod.executors.rayserve) has one more port, the
last, for its head's GCS: rank 0's is Serve's HTTP proxy, its one endpoint.
"""

from __future__ import annotations

import sys

from fairpod.executors import raycluster
from fairpod.sandbox.container import RAY_LAUNCHER
from fairpod.store.records import Job

LAUNCHER = "fairpod.executors.raycluster"


# in a container image: the launcher's file, bound in read-only by the node (fairpod.sandbox.container), run by the
# image's Python that has Ray (a Ray image's ``python``, else ``python3``)
IN_IMAGE = RAY_LAUNCHER
IN_IMAGE_SH = ('for p in python python3; do command -v "$p" >/dev/null 2>&1 && '
               '"$p" -c "import importlib.util as u, sys; sys.exit(u.find_spec(\'ray\') is None)" 2>/dev/null && '
               f'exec "$p" {IN_IMAGE} -- "$@"; done; '
               'echo "fairpod ray: no python with Ray in this image (python, python3)" >&2; exit 127')


def command(job: Job) -> list[str]:
    """What the replicas of ``job`` run."""
    if not job.spec.ray:
        return list(job.spec.command)
    if job.spec.image:
        return ["/bin/sh", "-c", IN_IMAGE_SH, "fairpod-ray", *job.spec.command]
    # by its file: the control plane's own launcher runs, not another fairpod the replica's environment finds first
    return [sys.executable, raycluster.__file__, "--", *job.spec.command]


def env(job: Job) -> dict[str, str]:
    """The sizes a Ray job's replicas give their Ray nodes (none for other jobs)."""
    if not job.spec.ray:
        return {}
    standing = {"FAIRPOD_RAY_STANDING": "1"} if job.spec.service is not None else {}  # a service: a standing cluster
    return {"FAIRPOD_VCPU_MILLI": str(job.mcpu), "FAIRPOD_MEMORY_MIB": str(job.mib),
            "FAIRPOD_TERM_GROUP_FIRST": "1", **standing}  # the Ray processes outlive the entrypoint's SIGTERM


def extra_ports(job: Job) -> int:
    """Ports a service's launch picks beyond one per replica: 1 for a Ray Serve service's head GCS, else 0."""
    return int(bool(job.spec.ray and job.spec.service is not None and raycluster.SERVE in job.spec.env))
