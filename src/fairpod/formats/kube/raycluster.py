"""KubeRay ``RayCluster`` manifests (``apiVersion: ray.io/v1``) read into a fairpod Ray service: a standing Ray
cluster that runs until it is deleted (``fairpod delete-service NAME``), to which a user attaches Ray drivers.

The groups are read as a RayJob's ``rayClusterSpec`` (``fairpod.formats.kube.rayjob``: the image, the container's
env and volumes, the resources, one replica shape, the team, the priority, the instance type): the head on rank 0,
the workers' ``replicas`` on the others. With ``enableInTreeAutoscaling: true`` the service grows from 1 +
``minReplicas`` to 1 + ``maxReplicas`` replicas into idle capacity (a service's min..max). Each replica's Ray node
listens on its service port (the head's GCS on rank 0's), so the service's TCP readiness is the Ray node answering
(``fairpod.executors.raycluster``, a standing cluster). A replica that exits starts again on its own, a worker
rejoins the head.

- **rayStartParams**: as a RayJob's (fairpod.formats.kube.ray_start: the resources given to ``ray start`` of the
  group's nodes, where Ray writes refused by name, the rest accepted with a warning).
- **noted, not used**: ``autoscalerOptions``, ``headServiceAnnotations``, ``upgradeStrategy``,
  ports and probes (fairpod starts Ray itself on free ports; the dashboard is not started).
- **refused, by name**: ``suspend: true``, ``gcsFaultToleranceOptions`` (no external Redis here), several images,
  unknown ``spec`` fields.
"""

from __future__ import annotations

from typing import Any

from fairpod.formats.kube.image import DOCKER_HUB
from fairpod.formats.kube.manifest import PRIORITY_LABEL, Converted, ManifestError, mapping
from fairpod.formats.kube.rayjob import _shape, _workers, convert_kind, opening, place
from fairpod.formats.kube.teams import Teams

KNOWN_SPEC = {"rayVersion", "headGroupSpec", "workerGroupSpecs", "enableInTreeAutoscaling", "autoscalerOptions",
              "headServiceAnnotations", "suspend", "upgradeStrategy", "managedBy", "gcsFaultToleranceOptions"}


def convert(doc: dict[str, Any], *, cwd: str, teams: Teams | None = None, on_host: bool = False,
            registry: str = DOCKER_HUB) -> Converted:
    """One RayCluster as the body of a fairpod service submit; ManifestError with one line per refused field."""
    name, spec, r, labels, team = opening(doc, "RayCluster", teams, on_host, registry)
    for key in sorted(set(spec) - KNOWN_SPEC):
        r.refused.append(f"spec.{key}: not known to fairpod")
    if spec.get("suspend"):
        r.refused.append("spec.suspend: true: fairpod queues the cluster itself; submit it when it should run")
    if spec.get("gcsFaultToleranceOptions"):
        r.refused.append("spec.gcsFaultToleranceOptions: fairpod runs no external Redis for the head's GCS; a "
                         "restarted head starts a new Ray cluster (its workers rejoin it)")
    noted = [k for k in ("headServiceAnnotations", "upgradeStrategy", "managedBy")
             if spec.get(k)]
    if noted:
        r.notes.append(f"spec.{', spec.'.join(noted)} not used: fairpod gives the cluster one "
                       "address (fairpod get-service)")
    sizes = [r.group(mapping(spec.get("headGroupSpec"), "spec.headGroupSpec"), "spec.headGroupSpec")]
    size = _workers(spec, r, sizes, "spec", "RayCluster")
    r.env.update(r.start_env())
    if len(r.images) > 1 and not on_host:
        r.refused.append(f"{', '.join(f'{w}.image {i}' for i, w in r.images.values())}: one image for every Ray "
                         "node of a cluster")
    if r.refused:
        raise ManifestError("\n".join(f"RayCluster {name}: {x}" for x in r.refused))
    priority = str(labels[PRIORITY_LABEL]).removesuffix("-priority") if labels.get(PRIORITY_LABEL) else None
    body: dict[str, Any] = {"name": name, "team": team, "priority": priority, "instance_type": r.instance_type,
                            **size, "command": [], "ray": True, "service": {}, "env": r.env, **_shape(sizes, r)}
    place(body, r, on_host, cwd, None, "no container image: the Ray installed on the nodes runs")
    if r.grace is not None:
        body["termination_grace_seconds"] = r.grace
    r.notes.append("a standing Ray cluster until 'fairpod delete-service " + name + "'; attach a Ray driver on "
                   "this machine with RAY_ADDRESS=<the head's endpoint> (fairpod get-service " + name + ")")
    return Converted({k: v for k, v in body.items() if v not in (None, [], {}) or k in ("command", "service")},
                     r.warnings, r.notes, ("RayCluster", "raycluster.ray.io"))


def convert_all(docs: list[Any], *, cwd: str, teams: Teams | None = None, on_host: bool = False,
                registry: str = DOCKER_HUB) -> list[Converted]:
    """Every RayCluster of ``docs``; ManifestError naming every refused field of all of them."""
    return convert_kind(docs, "RayCluster", lambda d: convert(d, cwd=cwd, teams=teams, on_host=on_host,
                                                              registry=registry))
