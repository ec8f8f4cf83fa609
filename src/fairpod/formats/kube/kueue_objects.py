"""The Kueue objects of a directory (fairpod.formats.kube.importer), sorted by kind: the kinds fairpod reads
(``kube.kueue.KINDS``), Namespaces skipped, every other object noted as skipped, and the Kueue kinds with no
fairpod meaning (admission checks, MultiKueue) refused by their own name; the one-line error naming an object's
field, and the accessors every kind's reader shares."""

from __future__ import annotations

import json
from typing import Any

from fairpod.formats.kube import kueue as K
from fairpod.formats.kube.manifest import ManifestError, quantity


class ImportError_(ValueError):  # noqa: N801 - ImportError is a builtin
    """Objects that cannot be read as a fairpod spec; the message names the object and field. It is one line:
    control characters of the objects' own strings (a name, a label) it quotes are shown escaped."""

    def __init__(self, message: str) -> None:
        super().__init__("".join(c if c.isprintable() else repr(c)[1:-1] for c in message))



def _flatten(docs: list[Any]) -> list[dict[str, Any]]:
    out = []
    for i, d in enumerate(docs):
        if not isinstance(d, dict):
            raise ImportError_(f"document {i + 1} is not a mapping")
        if str(d.get("kind", "")).endswith("List") and isinstance(d.get("items"), list):
            out += _flatten(d["items"])
        else:
            out.append(d)
    return out


def as_map(v: Any, where: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ImportError_(f"{where} must be a mapping")
    return v


def as_list(v: Any, where: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ImportError_(f"{where} must be a list")
    return v


def qty(v: Any, where: str) -> float:
    try:
        return quantity(v, where)
    except ManifestError as e:
        raise ImportError_(str(e)) from None


# Kueue objects with no fairpod meaning: refused by their own name (not skipped: a cluster that needs them
# would silently run differently)
_CHECKS = "admission checks (provisioning requests, MultiKueue) gate admission on another system; fairpod admits by " \
    "its own quota rules and has none"
REFUSED = {
    "AdmissionCheck": _CHECKS,
    "ProvisioningRequestConfig": _CHECKS,
    "MultiKueueConfig": "MultiKueue dispatches workloads to other Kubernetes clusters; a fairpod server schedules "
    "its own nodes (Ray for several hosts)",
    "MultiKueueCluster": "MultiKueue dispatches workloads to other Kubernetes clusters; a fairpod server schedules "
    "its own nodes (Ray for several hosts)",
    "AdmissionFairSharingStatus": "Kueue's status, not configuration",
}


class Objects:
    def __init__(self, docs: list[Any], notes: list[str]) -> None:
        self.by_kind: dict[str, list[dict[str, Any]]] = {k: [] for k in K.KINDS}
        seen: set[tuple[str, str, str]] = set()
        skipped: list[str] = []
        for d in _flatten(docs):
            kind, api = str(d.get("kind", "")), str(d.get("apiVersion", ""))
            meta = as_map(d.get("metadata"), f"{kind or 'object'}.metadata")
            name = str(meta.get("name") or "")
            if kind in K.KINDS and api in K.READ_APIS:
                if not name:
                    raise ImportError_(f"a {kind} has no metadata.name")
                key = (kind, str(meta.get("namespace") or ""), name)
                if key in seen:
                    raise ImportError_(f"{kind} {name} is defined twice")
                seen.add(key)
                self.by_kind[kind].append(d)
            elif kind == "Namespace" and api == "v1":
                continue
            else:
                skipped.append(f"{kind or '(no kind)'}/{name or '?'} ({api or 'no apiVersion'})")
        refused = [f"{kind} {name or '?'}: {why}" for d in _flatten(docs)
                   if (why := REFUSED.get(kind := str(d.get("kind", "")))) is not None
                   and str(d.get("apiVersion", "")).startswith(K.GROUP)
                   for name in [str(as_map(d.get("metadata"), "metadata").get("name") or "")]]
        for cq in self.by_kind["ClusterQueue"]:
            for key in ("admissionChecks", "admissionChecksStrategy"):
                if as_map(cq.get("spec"), "ClusterQueue.spec").get(key):
                    refused.append(f"ClusterQueue {name_of(cq)}.spec.{key}: {REFUSED['AdmissionCheck']}")
        if refused:  # one answer: the objects of each reason, then the reason
            by_why: dict[str, list[str]] = {}
            for r in refused:
                what, why = r.split(": ", 1)
                by_why.setdefault(why, []).append(what)
            raise ImportError_("no fairpod meaning: " + "; ".join(f"{', '.join(w)}: {why}" for why, w in by_why.items()))
        if skipped:
            notes.append(f"skipped (not a Kueue object fairpod reads): {', '.join(skipped)}")
        if not self.by_kind["ClusterQueue"] and not self.by_kind["Cohort"] \
                and not self.by_kind["WorkloadPriorityClass"]:
            raise ImportError_("no kueue.x-k8s.io ClusterQueue, Cohort or WorkloadPriorityClass found: nothing to "
                               "read a cluster from")


def annotation(obj: dict[str, Any], key: str) -> Any:
    raw = as_map(obj.get("metadata"), "metadata").get("annotations") or {}
    if not isinstance(raw, dict) or key not in raw:
        return None
    try:
        return json.loads(str(raw[key]))
    except ValueError:
        return None


def name_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


