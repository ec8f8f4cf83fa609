"""What every Kubernetes manifest fairpod reads shares (fairpod.formats.kube: PyTorchJob, batch Job, RayJob,
RayCluster): the one-line error naming the field, the converted job, Kubernetes quantities and whole numbers, the
team and the priority class a manifest names."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fairpod.formats.kube.teams import TeamError, Teams

PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
ACCEL_RESOURCES = ("nvidia.com/gpu", "aws.amazon.com/neurondevice", "aws.amazon.com/neuron", "amd.com/gpu")
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class ManifestError(ValueError):
    """A manifest fairpod cannot run; the message names the field."""


@dataclass
class Converted:
    body: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kind: tuple[str, str] = ("PyTorchJob", "pytorchjob.kubeflow.org")  # its kind, and as kubectl names what it made


def mapping(v: Any, where: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ManifestError(f"{where} must be a mapping")
    return v


def quantity(v: Any, where: str) -> float:
    """A Kubernetes quantity: ``4``, ``500m``, ``32Gi``, ``1.5G``, ``1e3`` … as a plain number."""
    text = str(v).strip()
    m = re.fullmatch(r"([0-9.]+(?:[eE][-+]?\d+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?", text)
    if not m:
        raise ManifestError(f"{where}: cannot read the quantity {v!r}")
    num = float(m.group(1))
    mult = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "Ki": 2**10,
            "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}[m.group(2)]
    return num * mult



def team_of(meta: dict[str, Any], labels: list[dict[str, Any]], teams: Teams | None = None) -> tuple[str, str]:
    """The job's team (fairpod.formats.kube.teams); without ``teams``, HyperPod's names are read."""
    try:
        return (teams or Teams()).resolve(meta, labels)
    except TeamError as e:
        raise ManifestError(str(e)) from None



def whole(value: Any, where: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit() \
            or int(value) < least:
        raise ManifestError(f"{where}: {value!r} is not a whole number of at least {least}")
    return int(value)

