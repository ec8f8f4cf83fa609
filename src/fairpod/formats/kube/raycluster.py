"""KubeRay ``RayCluster`` manifests (``apiVersion: ray.io/v1``) read into a fairpod Ray service: a standing Ray
cluster that runs until it is deleted (``fairpod delete-service NAME``), to which a user attaches Ray drivers.

The groups are read as a RayJob's ``rayClusterSpec`` (``fairpod.formats.kube.rayjob``: the image, the container's
env and volumes, the resources, one replica shape, the team, the priority, the instance type): the head on rank 0,
the workers' ``replicas`` on the others. With ``enableInTreeAutoscaling: true`` the service grows from 1 +
``minReplicas`` to 1 + ``maxReplicas`` replicas into idle capacity (a service's min..max). Each replica's Ray node
listens on its service port (the head's GCS on rank 0's), and is ready while its Ray node is ALIVE in the head's
node table (``fairpod.executors.raycluster``, a standing cluster; the readiness command a Ray service gets,
``fairpod.model.services.RAY_NODE_READY``). A replica that exits starts again on its own, a worker
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
from fairpod.formats.kube.rayjob import _Reader, _shape, _workers, convert_kind, opening, place
from fairpod.formats.kube.teams import Teams

KNOWN_SPEC = {"rayVersion", "headGroupSpec", "workerGroupSpecs", "enableInTreeAutoscaling", "autoscalerOptions",
              "headServiceAnnotations", "suspend", "upgradeStrategy", "managedBy", "gcsFaultToleranceOptions"}


def read_cluster(rc: dict[str, Any], r: _Reader, at: str, kind: str, on_host: bool) -> tuple[dict[str, int],
                                                                                              list[dict[str, Any]]]:
    """A RayCluster's spec (``at``: where it is in the manifest, ``spec`` or a RayService's
    ``spec.rayClusterConfig``): the replicas ({nodes} or elastic) and each group's resources; refusals kept on
    ``r``."""
    for key in sorted(set(rc) - KNOWN_SPEC):
        r.refused.append(f"{at}.{key}: not known to fairpod")
    if rc.get("suspend"):
        r.refused.append(f"{at}.suspend: true: fairpod queues the cluster itself; submit it when it should run")
    if rc.get("gcsFaultToleranceOptions"):
        r.refused.append(f"{at}.gcsFaultToleranceOptions: fairpod runs no external Redis for the head's GCS; a "
                         "restarted head starts a new Ray cluster (its workers rejoin it)")
    noted = [f"{at}.{k}" for k in ("headServiceAnnotations", "upgradeStrategy", "managedBy") if rc.get(k)]
    if noted:
        r.notes.append(f"{', '.join(noted)} not used: fairpod gives the cluster one address (fairpod get-service)")
    sizes = [r.group(mapping(rc.get("headGroupSpec"), f"{at}.headGroupSpec"), f"{at}.headGroupSpec")]
    size = _workers(rc, r, sizes, at, kind)
    r.env.update(r.start_env())
    if len(r.images) > 1 and not on_host:
        r.refused.append(f"{', '.join(f'{w}.image {i}' for i, w in r.images.values())}: one image for every Ray "
                         "node of a cluster")
    return size, sizes


def service_body(name: str, team: str, labels: dict[str, Any], r: _Reader, size: dict[str, int],
                 sizes: list[dict[str, Any]]) -> dict[str, Any]:
    """The body of a Ray service (a standing cluster) before its image or host is placed."""
    priority = str(labels[PRIORITY_LABEL]).removesuffix("-priority") if labels.get(PRIORITY_LABEL) else None
    body: dict[str, Any] = {"name": name, "team": team, "priority": priority, "instance_type": r.instance_type,
                            **size, "command": [], "ray": True, "service": {}, "env": r.env, **_shape(sizes, r)}
    if r.grace is not None:
        body["termination_grace_seconds"] = r.grace
    return body


def convert(doc: dict[str, Any], *, cwd: str, teams: Teams | None = None, on_host: bool = False,
            registry: str = DOCKER_HUB) -> Converted:
    """One RayCluster as the body of a fairpod service submit; ManifestError with one line per refused field."""
    name, spec, r, labels, team = opening(doc, "RayCluster", teams, on_host, registry)
    size, sizes = read_cluster(spec, r, "spec", "RayCluster", on_host)
    if r.refused:
        raise ManifestError("\n".join(f"RayCluster {name}: {x}" for x in r.refused))
    body = service_body(name, team, labels, r, size, sizes)
    place(body, r, on_host, cwd, None, "no container image: the Ray installed on the nodes runs")
    r.notes.append("a standing Ray cluster until 'fairpod delete-service " + name + "'; attach a Ray driver on "
                   "this machine with RAY_ADDRESS=<the head's endpoint> (fairpod get-service " + name + ")")
    return Converted({k: v for k, v in body.items() if v not in (None, [], {}) or k in ("command", "service")},
                     r.warnings, r.notes, ("RayCluster", "raycluster.ray.io"))


def convert_all(docs: list[Any], *, cwd: str, teams: Teams | None = None, on_host: bool = False,
                registry: str = DOCKER_HUB) -> list[Converted]:
    """Every RayCluster of ``docs``; ManifestError naming every refused field of all of them."""
    return convert_kind(docs, "RayCluster", lambda d: convert(d, cwd=cwd, teams=teams, on_host=on_host,
                                                              registry=registry))
