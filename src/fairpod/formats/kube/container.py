"""A pod template's container as fairpod runs it (every kind with pod templates: PyTorchJob, batch Job, RayJob,
RayCluster): which container runs, its resources (accelerators, MIG partitions, cpu, memory), its command, its
``env``, and the instance types a required node affinity lists."""

from __future__ import annotations

import json
import re
from typing import Any

from fairpod.formats.kube.manifest import (
    ACCEL_RESOURCES,
    INSTANCE_TYPE_LABELS,
    ManifestError,
    mapping,
    quantity,
)


def container(spec: dict[str, Any], where: str, warnings: list[str]) -> dict[str, Any]:
    containers = spec.get("containers") or []
    if not isinstance(containers, list) or not containers:
        raise ManifestError(f"{where}.spec.containers: the pod template has no container")
    chosen = next((c for c in containers if isinstance(c, dict) and c.get("name") == "pytorch"), containers[0])
    others = [str(c.get("name")) for c in containers if c is not chosen and isinstance(c, dict)]
    if others:
        warnings.append(f"{where}: only the container {chosen.get('name')!r} runs; not run: {', '.join(others)}")
    if spec.get("initContainers"):
        warnings.append(f"{where}.spec.initContainers are not run on the local executor")
    return mapping(chosen, f"{where}.spec.containers[{chosen.get('name')}]")



def resources(c: dict[str, Any], where: str, warnings: list[str]) -> dict[str, Any]:
    res = mapping(c.get("resources"), f"{where}.resources")
    limits, requests = mapping(res.get("limits"), f"{where}.resources.limits"), mapping(res.get("requests"),
                                                                               f"{where}.resources.requests")
    out: dict[str, Any] = {}
    ignored = []
    for key in sorted(set(limits) | set(requests)):
        v = limits.get(key, requests.get(key))
        mig = re.fullmatch(r"nvidia\.com/(mig-[0-9]+g\.[0-9]+gb)", key)
        if mig:  # MIG partitions, as the GPU operator's mixed strategy names them
            n = quantity(v, f"{where}.resources {key}")
            if "accelerator_partition_type" in out or n != int(n) or n < 1:
                raise ManifestError(f"{where}.resources {key}: one MIG profile, a whole number of partitions")
            out.update(accelerator_partition_type=mig.group(1), accelerator_partition_count=int(n))
        elif key in ACCEL_RESOURCES:
            out["accelerators"] = out.get("accelerators", 0.0) + quantity(v, f"{where}.resources {key}")
        elif key == "cpu":
            out["vcpu"] = quantity(v, f"{where}.resources cpu")
        elif key == "memory":
            out["memory_gib"] = quantity(v, f"{where}.resources memory") / 2**30
        else:
            ignored.append(key)
    if ignored:
        warnings.append(f"{where}.resources: {', '.join(ignored)} not known to fairpod; ignored")
    if "accelerator_partition_type" in out and out.get("accelerators"):
        raise ManifestError(f"{where}.resources: whole GPUs and MIG partitions at once; ask for one of them")
    return out



def command(c: dict[str, Any], where: str, in_image: bool = False) -> list[str]:
    cmd, args = c.get("command") or [], c.get("args") or []
    if not isinstance(cmd, list) or not isinstance(args, list):
        raise ManifestError(f"{where}: command and args must be lists")
    argv = [str(x) for x in [*cmd, *args]]
    if not cmd and not in_image:
        raise ManifestError(f"{where}.command: the container has no command (the image's entrypoint cannot be "
                            "used on the local executor); give the command to run")
    return argv



def env(c: dict[str, Any], where: str, warnings: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    skipped = []
    for e in c.get("env") or []:
        if not isinstance(e, dict) or "name" not in e:
            raise ManifestError(f"{where}.env: every entry needs a name")
        if "value" in e:
            out[str(e["name"])] = "" if e["value"] is None else str(e["value"])
        else:
            skipped.append(str(e["name"]))
    if skipped:
        warnings.append(f"{where}.env: {', '.join(skipped)} use valueFrom (secrets, config maps, fields), which "
                        "the local executor cannot resolve; not set")
    if c.get("envFrom"):
        warnings.append(f"{where}.envFrom cannot be resolved on the local executor; not set")
    return out



def signature(c: dict[str, Any], spec: dict[str, Any]) -> str:
    keep = {k: c.get(k) for k in ("command", "args", "env", "resources", "image", "workingDir")}
    return json.dumps([keep, spec.get("nodeSelector")], sort_keys=True, default=str)



def instance_types_in(affinity: Any) -> list[str]:
    """The instance types a pod's required node affinity allows (``node.kubernetes.io/instance-type In [a, b]``),
    in the order listed, when that is all it says; else []."""
    if not isinstance(affinity, dict) or set(affinity) != {"nodeAffinity"}:
        return []
    na = affinity["nodeAffinity"]
    if not isinstance(na, dict) or set(na) != {"requiredDuringSchedulingIgnoredDuringExecution"}:
        return []
    terms = (na["requiredDuringSchedulingIgnoredDuringExecution"] or {}).get("nodeSelectorTerms") or []
    if len(terms) != 1 or not isinstance(terms[0], dict):
        return []
    exprs = terms[0].get("matchExpressions") or []
    if len(exprs) != 1 or not isinstance(exprs[0], dict):
        return []
    e = exprs[0]
    if e.get("key") not in INSTANCE_TYPE_LABELS or e.get("operator") != "In" or not isinstance(e.get("values"), list):
        return []
    return [str(v) for v in e["values"]]
