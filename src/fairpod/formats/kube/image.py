"""A PyTorchJob container run in its image (fairpod.formats.kube): its hostPath volume mounts, and the variables
the training operator gives it, as ``$(VAR)`` templates of the replica's own (expanded as the container starts,
as Kubernetes expands them)."""

from __future__ import annotations

from typing import Any


def host_mounts(c: dict[str, Any], tspec: dict[str, Any], where: str, warnings: list[str]) -> list[str]:
    """``volumeMounts`` of ``hostPath`` volumes as HOST:CONTAINER[:ro]; others are warned about."""
    host = {v.get("name"): (v.get("hostPath") or {}).get("path") for v in tspec.get("volumes") or []
            if isinstance(v, dict)}
    out, skipped = [], []
    for m in c.get("volumeMounts") or []:
        if not isinstance(m, dict) or not m.get("mountPath"):
            raise ValueError(f"{where}.volumeMounts: every entry needs a mountPath")
        path = host.get(m.get("name"))
        if path:
            out.append(f"{path}:{m['mountPath']}" + (":ro" if m.get("readOnly") else ""))
        else:
            skipped.append(str(m["mountPath"]))
    if skipped:
        warnings.append(f"{where}.volumeMounts: {', '.join(skipped)} are not hostPath volumes; not mounted")
    return out


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
