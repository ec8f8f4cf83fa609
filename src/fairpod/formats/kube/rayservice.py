"""KubeRay ``RayService`` manifests (``apiVersion: ray.io/v1``) read into a fairpod service: a standing Ray cluster
(its ``rayClusterConfig`` read as a RayCluster's spec, fairpod.formats.kube.raycluster: the head on rank 0, the
workers' replicas on the others, the image through podman or the Ray on the nodes, the team, priority and instance
type) on which Ray Serve deploys the applications of ``serveConfigV2`` (fairpod.formats.kube.serve_config) once
the head is up (fairpod.executors.rayserve). It is governed as any service: its replicas within its team's quota,
preempted and requeued by priority, until ``fairpod delete-service NAME``.

- **its address**: Serve's HTTP proxy on the head, on the head's service port (loopback); the service's address
  (``fairpod get-service``) forwards to it. The head's GCS takes another port that the workers join.
- **ready**: while Serve reports every application RUNNING (the readiness command reads what fairpod's Serve
  driver on the head last saw; the workers run Serve's replicas and take no requests themselves, so only the head
  is an endpoint).
- **accepted with one warning** (no meaning here): ``upgradeStrategy``, ``serviceUnhealthySecondThreshold``,
  ``deploymentUnhealthySecondThreshold``, ``rayClusterDeletionDelaySeconds``, ``excludeHeadPodFromServeSvc``,
  ``serveService``, ``managedBy``: fairpod runs one cluster per service and restarts a replica that exits.
- **refused, by name**: ``suspend: true``, a ``serveConfigV2`` missing or not Serve's config, URLs as code
  (``working_dir``), what a RayCluster refuses, unknown ``spec`` fields.
"""

from __future__ import annotations

import json
from typing import Any

from fairpod.formats.kube import serve_config
from fairpod.formats.kube.image import DOCKER_HUB
from fairpod.formats.kube.manifest import Converted, ManifestError, mapping
from fairpod.formats.kube.raycluster import read_cluster, service_body
from fairpod.formats.kube.rayjob import convert_kind, opening, place
from fairpod.formats.kube.teams import Teams

SERVE = "FAIRPOD_RAY_SERVE"  # read by fairpod.executors.rayserve (and the core: its head's GCS on one more port)
# fairpod's Serve driver keeps this file while every application is RUNNING (fairpod.executors.rayserve.READY), in
# the head's private /tmp; a worker has none, so it is no endpoint
READY = ["sh", "-c", 'test -e "/tmp/fairpod-serve-ready-$PORT"']
UNUSED = ("upgradeStrategy", "serviceUnhealthySecondThreshold", "deploymentUnhealthySecondThreshold",
          "rayClusterDeletionDelaySeconds", "excludeHeadPodFromServeSvc", "serveService", "managedBy")
KNOWN_SPEC = {"serveConfigV2", "rayClusterConfig", "suspend", *UNUSED}


def convert(doc: dict[str, Any], *, cwd: str, teams: Teams | None = None, on_host: bool = False,
            registry: str = DOCKER_HUB) -> Converted:
    """One RayService as the body of a fairpod service submit; ManifestError with one line per refused field."""
    name, spec, r, labels, team = opening(doc, "RayService", teams, on_host, registry)
    for key in sorted(set(spec) - KNOWN_SPEC):
        r.refused.append(f"spec.{key}: not known to fairpod")
    if spec.get("suspend"):
        r.refused.append("spec.suspend: true: fairpod queues the service itself; apply it when it should run")
    unused = [f"spec.{k}" for k in UNUSED if spec.get(k) not in (None, False)]
    if unused:
        r.warnings.append(f"{', '.join(unused)}: not used: fairpod runs one Ray cluster per service, restarts a "
                          "replica that exits, and gives the service its own address (fairpod get-service)")
    rc = mapping(spec.get("rayClusterConfig"), "spec.rayClusterConfig")
    if not rc:
        r.refused.append("spec.rayClusterConfig: the Ray cluster to serve on is missing")
    size, sizes = read_cluster(rc, r, "spec.rayClusterConfig", "RayService", on_host)
    config, dirs = serve_config.read(spec.get("serveConfigV2"), cwd, r.refused, r.notes)
    if r.refused:
        raise ManifestError("\n".join(f"RayService {name}: {x}" for x in r.refused))
    body = service_body(name, team, labels, r, size, sizes)
    body["service"] = {"readiness_command": READY}
    body["env"][SERVE] = json.dumps(config, sort_keys=True)
    workdir = serve_config.workdir(dirs)
    if workdir:
        r.notes.append(f"the applications' runtime_env working_dir: the service's working directory {workdir}"
                       + ("" if on_host or not r.images else ", bound into the image at that path"))
    place(body, r, on_host, workdir or cwd, workdir, "no container image: the Ray installed on the nodes runs")
    apps = ", ".join(f"{a.get('name', 'default')} ({a.get('route_prefix', '/')})" for a in config["applications"])
    r.notes.append(f"Ray Serve deploys {apps} once the head is up; the service is ready while they are RUNNING, "
                   f"at its address (fairpod get-service {name}), until 'fairpod delete-service {name}'")
    return Converted({k: v for k, v in body.items() if v not in (None, [], {}) or k == "command"},
                     r.warnings, r.notes, ("RayService", "rayservice.ray.io"))


def convert_all(docs: list[Any], *, cwd: str, teams: Teams | None = None, on_host: bool = False,
                registry: str = DOCKER_HUB) -> list[Converted]:
    """Every RayService of ``docs``; ManifestError naming every refused field of all of them."""
    return convert_kind(docs, "RayService", lambda d: convert(d, cwd=cwd, teams=teams, on_host=on_host,
                                                              registry=registry))
