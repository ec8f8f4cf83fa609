"""Kueue's CRD OpenAPI schemas (``../shared/kueue/crds``, from kubernetes-sigs/kueue) as validators.

An object is checked as the API server would check it on ``kubectl apply``: the JSON schema of the served
version (with unknown fields refused, as ``kubectl apply --validate=strict`` does), and the CEL rules
(``x-kubernetes-validations``) met on the way, each evaluated by its Python equivalent below. A rule with no
equivalent fails the check, so a schema update cannot pass unchecked.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRDS = Path(__file__).resolve().parents[3].parent / "shared" / "kueue" / "crds"


def _has(d: Any, k: str) -> bool:
    return isinstance(d, dict) and k in d


# CEL rule text -> Python equivalent (self as a dict); rules comparing with oldSelf apply to updates only
CEL: dict[str, Any] = {
    "!has(self.cohortName) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, "
    "f.resources.all(r, !has(r.borrowingLimit)))) : true":
        lambda s: _has(s, "cohortName") or not _has(s, "resourceGroups") or all(
            "borrowingLimit" not in r for rg in s["resourceGroups"] for f in rg["flavors"] for r in f["resources"]),
    "self.flavors.all(x, size(x.resources) == size(self.coveredResources))":
        lambda s: all(len(f["resources"]) == len(s["coveredResources"]) for f in s["flavors"]),
    "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) &&  self.borrowWithinCohort.policy != "
    "'Never')":
        lambda s: not (s.get("reclaimWithinCohort", "Never") == "Never" and _has(s, "borrowWithinCohort")
                       and s["borrowWithinCohort"].get("policy", "Never") != "Never"),
    "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && self.whenCanPreempt == 'TryNextFlavor')":
        lambda s: not _has(s, "preference") or (s.get("whenCanBorrow") == "TryNextFlavor"
                                                 and s.get("whenCanPreempt") == "TryNextFlavor"),
    "!has(self.topologyName) || self.nodeLabels.size() >= 1":
        lambda s: not _has(s, "topologyName") or len(s.get("nodeLabels") or {}) >= 1,
    # Topology.spec.levels: unique, and kubernetes.io/hostname only as the lowest level
    "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0":
        lambda s: all(s.count(x) == 1 for x in s),
    "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || self[size(self) - 1].nodeLabel == "
    "'kubernetes.io/hostname'":
        lambda s: all(x["nodeLabel"] != "kubernetes.io/hostname" for x in s)
        or s[-1]["nodeLabel"] == "kubernetes.io/hostname",
}


def _strict(schema: Any) -> Any:
    """The schema with ``additionalProperties: false`` wherever properties are listed and unknown fields are
    not preserved (Kubernetes prunes them; strict validation refuses them)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(x) for x in schema]
    return schema


class Crds:
    def __init__(self, root: Path = CRDS) -> None:
        self.schemas: dict[tuple[str, str], dict[str, Any]] = {}
        self.scope: dict[str, str] = {}
        for f in sorted(root.glob("*.yaml")):
            crd = yaml.safe_load(f.read_text())
            kind, group = crd["spec"]["names"]["kind"], crd["spec"]["group"]
            self.scope[kind] = crd["spec"]["scope"]
            for v in crd["spec"]["versions"]:
                if v.get("served"):
                    self.schemas[(f"{group}/{v['name']}", kind)] = v["schema"]["openAPIV3Schema"]

    def versions(self, kind: str) -> list[str]:
        return [api for api, k in self.schemas if k == kind]

    def errors(self, obj: dict[str, Any]) -> list[str]:
        key = (obj.get("apiVersion"), obj.get("kind"))
        if key not in self.schemas:
            return [f"no CRD serves {key[1]} in {key[0]}"]
        schema = self.schemas[key]  # type: ignore[index]
        name = (obj.get("metadata") or {}).get("name", "?")
        errs = [f"{key[1]} {name}: {'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
                for e in jsonschema.Draft7Validator(_strict(copy.deepcopy(schema))).iter_errors(obj)]
        meta = obj.get("metadata") or {}
        if self.scope[key[1]] == "Namespaced" and not meta.get("namespace"):  # type: ignore[index]
            errs.append(f"{key[1]} {name}: a namespaced object without metadata.namespace")
        if self.scope[key[1]] == "Cluster" and meta.get("namespace"):  # type: ignore[index]
            errs.append(f"{key[1]} {name}: a cluster-scoped object with a namespace")
        errs += [f"{key[1]} {name}: {e}" for e in self._cel(schema, obj, "")]
        return errs

    def _cel(self, schema: dict[str, Any], value: Any, path: str) -> list[str]:
        errs: list[str] = []
        for rule in schema.get("x-kubernetes-validations") or []:
            text = rule["rule"]
            if "oldSelf" in text:
                continue
            check = CEL.get(text)
            if check is None:
                errs.append(f"{path or '(root)'}: CEL rule with no Python equivalent in tests/formats/kube/crds.py: {text}")
            elif not check(value):
                errs.append(f"{path or '(root)'}: {rule.get('message', text)}")
        if isinstance(value, dict):
            for k, sub in (schema.get("properties") or {}).items():
                if k in value:
                    errs += self._cel(sub, value[k], f"{path}.{k}" if path else k)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                errs += self._cel(schema["items"], item, f"{path}[{i}]")
        return errs
