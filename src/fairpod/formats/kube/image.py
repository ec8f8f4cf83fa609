"""A Kubernetes container run in its image (fairpod.formats.kube): its image reference as Kubernetes resolves it,
its volumes (hostPath -> mounts, emptyDir -> scratch), and the variables the training operator gives it, as
``$(VAR)`` templates of the replica's own (expanded as the container starts, as Kubernetes expands them)."""

from __future__ import annotations

import math
import re
from typing import Any

REGISTRY_ENV = "FAIRPOD_DEFAULT_REGISTRY"  # where an unqualified image name is looked for (default Docker Hub)
DOCKER_HUB = "docker.io"
# volume sources that have no meaning on a fairpod node: refused by their own name
NO_MEANING = {
    "persistentVolumeClaim": "a PersistentVolumeClaim is storage Kubernetes provisions",
    "configMap": "a ConfigMap is a Kubernetes object", "secret": "a Secret is a Kubernetes object",
    "projected": "projected volumes are made of Kubernetes objects", "downwardAPI": "the downward API is Kubernetes'",
    "csi": "CSI drivers are Kubernetes'", "ephemeral": "ephemeral volumes are provisioned by Kubernetes",
}


class VolumeError(ValueError):
    """A volume fairpod cannot give the container; the message names it."""


def qualify(ref: str, registry: str = DOCKER_HUB) -> str:
    """``ref`` as Kubernetes (containerd, Docker) reads it: a name whose first part is no registry host (no ``.``
    or ``:``, not ``localhost``) is Docker Hub's, and a single name is in its ``library/``: ``pytorch/pytorch:2.1``
    is ``docker.io/pytorch/pytorch:2.1``, ``ubuntu`` is ``docker.io/library/ubuntu``. ``registry`` replaces
    Docker Hub (a mirror of it)."""
    first, slash, _ = ref.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return ref
    return f"{registry}/{ref}" if slash else f"{registry}/library/{ref}"


def volumes(c: dict[str, Any], tspec: dict[str, Any], where: str) -> tuple[list[str], list[str]]:
    """The container's ``volumeMounts``: ``hostPath`` volumes as mounts HOST:CONTAINER[:ro] (the admin's mount
    rules apply to them as to any job's mounts), ``emptyDir`` as scratch PATH[:MIB]; any other source refused by
    its name."""
    defined: dict[str, dict[str, Any]] = {}
    for v in tspec.get("volumes") or []:
        if not isinstance(v, dict) or not v.get("name"):
            raise VolumeError(f"{where}: every volume needs a name")
        defined[str(v["name"])] = v
    mounts, scratch, refused = [], [], []
    for m in c.get("volumeMounts") or []:
        if not isinstance(m, dict) or not m.get("mountPath"):
            raise VolumeError(f"{where}.volumeMounts: every entry needs a mountPath")
        name, path = str(m.get("name")), str(m["mountPath"])
        v = defined.get(name)
        if v is None:
            raise VolumeError(f"{where}.volumeMounts {path}: no volume named {name!r}")
        if isinstance(v.get("hostPath"), dict) and v["hostPath"].get("path"):
            host = str(v["hostPath"]["path"]).rstrip("/") or "/"
            if m.get("subPath"):
                host = f"{host}/{str(m['subPath']).strip('/')}"
            mounts.append(f"{host}:{path}" + (":ro" if m.get("readOnly") else ""))
        elif "emptyDir" in v:
            ed = v.get("emptyDir") or {}
            size = ed.get("sizeLimit") if isinstance(ed, dict) else None
            scratch.append(path + (f":{_mib(size, f'{where} volume {name}.emptyDir.sizeLimit')}" if size else ""))
        else:
            kind = next((k for k in v if k != "name"), "(no source)")
            why = NO_MEANING.get(kind, "fairpod mounts hostPath directories and emptyDir scratch only")
            refused.append(f"volume {name} ({kind}) at {path}: {why}")
    if refused:
        raise VolumeError(f"{where}: " + "; ".join(refused) + " (no meaning on a fairpod node: use a hostPath "
                          "directory the admin allows, or an emptyDir)")
    return mounts, scratch


def _mib(v: Any, where: str) -> int:
    m = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(v).strip())
    if not m:
        raise VolumeError(f"{where}: cannot read the quantity {v!r}")
    mult = {None: 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
            "Ti": 2**40}[m.group(2)]
    return max(1, math.ceil(float(m.group(1)) * mult / 2**20))


def image_env(pet: dict[str, Any], size: dict[str, int]) -> dict[str, str]:
    """What fairpod.formats.kube.pod sets on the node, as ``$(VAR)`` templates the container's start expands."""
    out = {"MASTER_ADDR": "$(MASTER_ADDR)"}
    if pet.get("elastic"):
        nnodes = f"{size['nodes']}:{size['max_nodes']}" if "max_nodes" in size else "$(WORLD_SIZE)"
        out.update(PET_RDZV_BACKEND="c10d", PET_RDZV_ENDPOINT="$(MASTER_ADDR):$(MASTER_PORT)", PET_NNODES=nnodes,
                   PET_RDZV_ID="$(FAIRPOD_JOB)")
        if pet.get("max_restarts") is not None:
            out["PET_MAX_RESTARTS"] = str(pet["max_restarts"])
        if pet.get("rdzv_conf"):
            out["PET_RDZV_CONF"] = str(pet["rdzv_conf"])
    else:
        out.update(PET_NNODES="$(WORLD_SIZE)", PET_NODE_RANK="$(RANK)", PET_MASTER_ADDR="$(MASTER_ADDR)",
                   PET_MASTER_PORT="$(MASTER_PORT)")
    if pet.get("nproc_per_node") is not None:
        out["PET_NPROC_PER_NODE"] = str(pet["nproc_per_node"])
    out.pop("MASTER_ADDR")
    return out
