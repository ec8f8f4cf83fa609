"""KubeRay ``RayJob`` manifests (``apiVersion: ray.io/v1``) read into a fairpod Ray job (``JobSpec.ray``).

The head group and the worker groups become one gang: 1 + the workers' ``replicas`` replicas of one shape (their
containers' resources must agree), the head on rank 0; ``entrypoint`` is the command, run against the job's own
Ray cluster (docs/workloads.md). The team comes from ``metadata.namespace`` (``hyperpod-ns-<team>``) or the label
``kueue.x-k8s.io/queue-name`` as for a PyTorchJob; ``activeDeadlineSeconds`` is the runtime limit.

What fairpod cannot honour is refused, one line per field (nothing is submitted): container images, volumes and
their mounts, lifecycle hooks, a runtime environment (``runtimeEnvYAML``: pip packages are not installed),
``rayStartParams`` (fairpod starts Ray itself), autoscaling (``minReplicas``/``maxReplicas`` other than
``replicas``), a submitter pod, ``suspend: true``, groups of different sizes, several containers.
"""

from __future__ import annotations

import shlex
from typing import Any

from fairpod.formats.kube import Converted, ManifestError, _map, _resources, _team
from fairpod.formats.kube.teams import Teams

KNOWN_SPEC = {"entrypoint", "rayClusterSpec", "shutdownAfterJobFinishes", "ttlSecondsAfterFinished",
              "activeDeadlineSeconds", "submissionMode", "suspend", "runtimeEnvYAML", "submitterPodTemplate",
              "metadata", "jobId", "entrypointNumCpus", "entrypointNumGpus", "entrypointResources",
              "backoffLimit", "managedBy", "deletionPolicy", "clusterSelector"}
SAFE_CONTAINER = {"name", "resources", "command", "args", "env", "ports", "imagePullPolicy", "workingDir"}


def _group(g: dict[str, Any], where: str, refused: list[str], notes: list[str]) -> dict[str, Any]:
    """The resources of one group's container; what cannot be honoured goes to ``refused``."""
    if _map(g.get("rayStartParams"), f"{where}.rayStartParams"):
        keys = ", ".join(sorted(_map(g.get("rayStartParams"), "")))
        refused.append(f"{where}.rayStartParams ({keys}): fairpod starts Ray itself, with the job's resources and "
                       "free ports")
    pod = _map(_map(g.get("template"), f"{where}.template").get("spec"), f"{where}.template.spec")
    if pod.get("volumes"):
        refused.append(f"{where}.template.spec.volumes: fairpod mounts no volumes (ConfigMaps included); the "
                       "entrypoint's files must be on the nodes")
    for key in sorted(set(pod) - {"containers", "volumes", "restartPolicy"}):
        refused.append(f"{where}.template.spec.{key}: not supported by fairpod")
    containers = pod.get("containers") or []
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
        refused.append(f"{where}.template.spec.containers: the pod template has no container")
        return {}
    if len(containers) > 1:
        refused.append(f"{where}.template.spec.containers: one container per Ray node (found {len(containers)})")
    c = containers[0]
    cw = f"{where}.template.spec.containers[{c.get('name', 0)}]"
    if c.get("image"):
        refused.append(f"{cw}.image {c['image']}: fairpod runs the Ray installed on the nodes, not container "
                       "images")
    for key in ("volumeMounts", "lifecycle"):
        if c.get(key):
            refused.append(f"{cw}.{key}: not supported by fairpod")
    for key in sorted(set(c) - SAFE_CONTAINER - {"image", "volumeMounts", "lifecycle"}):
        refused.append(f"{cw}.{key}: not supported by fairpod")
    if c.get("ports"):
        notes.append(f"{cw}.ports: ignored; the Ray processes get free ports of their own")
    return _resources(c, cw, notes)


def convert(doc: dict[str, Any], *, cwd: str, teams: Teams | None = None) -> Converted:
    """One RayJob as the body of a fairpod job submit; ManifestError with one line per refused field."""
    meta = _map(doc.get("metadata"), "metadata")
    name = str(meta.get("name") or "")
    spec = _map(doc.get("spec"), "spec")
    refused: list[str] = []
    notes: list[str] = []
    if str(doc.get("apiVersion", "")) not in ("ray.io/v1", "ray.io/v1alpha1"):
        refused.append(f"apiVersion {doc.get('apiVersion')!r}: fairpod reads ray.io/v1 RayJobs")
    try:
        team, _ = _team(meta, [_map(meta.get("labels"), "metadata.labels")], teams)
    except ManifestError as e:
        refused.append(str(e))
        team = ""
    entry = spec.get("entrypoint")
    command = shlex.split(entry) if isinstance(entry, str) else []
    if not command:
        refused.append("spec.entrypoint: the command to run against the Ray cluster is missing")
    if spec.get("runtimeEnvYAML"):
        refused.append("spec.runtimeEnvYAML: fairpod installs no runtime environment (pip packages, env_vars); "
                       "install them on the nodes and use env in the container")
    if spec.get("submitterPodTemplate"):
        refused.append("spec.submitterPodTemplate: fairpod runs the entrypoint on the head's replica itself")
    if spec.get("suspend"):
        refused.append("spec.suspend: true: fairpod queues the job itself; submit it when it should run")
    if spec.get("clusterSelector"):
        refused.append("spec.clusterSelector: fairpod starts a Ray cluster per job; it joins no existing one")
    for key in sorted(set(spec) - KNOWN_SPEC):
        refused.append(f"spec.{key}: not known to fairpod")
    rc = _map(spec.get("rayClusterSpec"), "spec.rayClusterSpec")
    head = _group(_map(rc.get("headGroupSpec"), "spec.rayClusterSpec.headGroupSpec"),
                  "spec.rayClusterSpec.headGroupSpec", refused, notes)
    workers = rc.get("workerGroupSpecs") or []
    if not isinstance(workers, list):
        raise ManifestError(f"RayJob {name}: spec.rayClusterSpec.workerGroupSpecs must be a list")
    replicas = 1
    for i, g in enumerate(workers):
        where = f"spec.rayClusterSpec.workerGroupSpecs[{i}]"
        g = _map(g, where)
        n = g.get("replicas", 1)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            refused.append(f"{where}.replicas: a whole number, not {n!r}")
            continue
        for bound in ("minReplicas", "maxReplicas"):
            if bound in g and g[bound] != n:
                refused.append(f"{where}.{bound} {g[bound]} (replicas {n}): fairpod runs a Ray job at a fixed size "
                               "(no Ray autoscaling)")
        res = _group(g, where, refused, notes)
        if n and res != head:
            refused.append(f"{where}: resources {res or 'none'} differ from the head's {head or 'none'}: fairpod "
                           "runs a Ray job as one gang of one shape")
        replicas += n
    if refused:
        raise ManifestError("\n".join(f"RayJob {name}: {r}" for r in refused))
    body: dict[str, Any] = {"name": name, "team": team, "nodes": replicas, "command": command, "ray": True,
                            "workdir": cwd, **head}
    if spec.get("activeDeadlineSeconds") is not None:
        body["max_runtime_seconds"] = spec["activeDeadlineSeconds"]
    if rc.get("rayVersion"):
        notes.append(f"rayVersion {rc['rayVersion']}: the Ray installed on the nodes runs")
    return Converted(body, [], notes, ("RayJob", "rayjob.ray.io"))


def convert_all(docs: list[Any], *, cwd: str, teams: Teams | None = None) -> list[Converted]:
    """Every RayJob of ``docs``; ManifestError naming every refused field of all of them."""
    out, errors = [], []
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == "RayJob":
            try:
                out.append(convert(d, cwd=cwd, teams=teams))
            except ManifestError as e:
                errors.append(str(e))
    if errors:
        raise ManifestError("\n".join(errors))
    return out
