"""Every object 'fairpod export kueue' writes, for every spec of examples/ and the tests and for generated specs,
is valid for Kueue's CRDs (OpenAPI schema of the version written, unknown fields refused, CEL rules) and for
Kubernetes' object metadata rules."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from fairpod.formats.kube import kueue as K
from fairpod.formats.kube.export import export_kueue, render
from fairpod.model.spec import ClusterSpec

from .crds import CRDS, Crds
from .specs import cluster_specs, corpus

pytestmark = pytest.mark.skipif(not CRDS.is_dir(), reason=f"Kueue's CRDs are not at {CRDS} (the shared/ "
                                "directory beside the checkout): nothing to validate against")

CORPUS = corpus()
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*"
                 r"[A-Za-z0-9])?$")


@pytest.fixture(scope="module")
def crds() -> Crds:
    return Crds()


def meta_errors(obj: dict[str, Any]) -> list[str]:
    """Kubernetes' ObjectMeta rules: names, label keys and values, annotation keys and size."""
    meta = obj["metadata"]
    name, kind = meta.get("name", ""), obj["kind"]
    errs = []
    # Namespaces and LocalQueues (whose names are label values) are DNS labels; the rest DNS subdomains
    if kind in ("Namespace", "LocalQueue"):
        if not (DNS_LABEL.match(name) and len(name) <= 63):
            errs.append(f"{kind} {name}: not a DNS label")
    elif not (K.DNS_SUBDOMAIN.match(name) and len(name) <= 253):
        errs.append(f"{kind} {name}: not a DNS subdomain")
    for k, v in (meta.get("labels") or {}).items():
        if not KEY.match(k) or len(k.split("/")[-1]) > 63 or not K.LABEL_VALUE.match(v) or len(v) > 63:
            errs.append(f"{kind} {name}: label {k}={v} is not valid")
    anns = meta.get("annotations") or {}
    for k in anns:
        if not KEY.match(k):
            errs.append(f"{kind} {name}: annotation key {k} is not valid")
    if sum(len(k) + len(v) for k, v in anns.items()) > 256 * 1024:
        errs.append(f"{kind} {name}: annotations above 256 KiB")
    return errs


def check(spec: ClusterSpec, crds: Crds) -> list[dict[str, Any]]:
    docs = []
    for text in render(export_kueue(spec)).values():  # as written to disk
        docs += [d for d in yaml.safe_load_all(text) if d is not None]
    errs = []
    for d in docs:
        errs += meta_errors(d)
        if d["kind"] == "Namespace":
            assert d["apiVersion"] == "v1" and set(d) == {"apiVersion", "kind", "metadata"}
        else:
            errs += crds.errors(d)
    assert not errs, "\n".join(errs)
    return docs


def test_the_validator_refuses_what_kueue_refuses(crds: Crds):
    """The checks can fail: a wrong enum, an unknown field, a broken CEL rule, a wrong version."""
    docs = check(CORPUS["examples/seed/spec.yaml#0"], crds)
    cq = next(d for d in docs if d["kind"] == "ClusterQueue")
    bad = [
        ({"preemption": {"withinClusterQueue": "Sometimes"}}, "is not one of"),
        ({"fairShare": {"weight": 1}}, "Additional properties are not allowed"),
        ({"preemption": {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}}},
         "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"),
        ({"cohortName": None}, "None is not of type 'string'"),
    ]
    for patch, msg in bad:
        obj = {**cq, "spec": {**cq["spec"], **patch}}
        assert any(msg in e for e in crds.errors(obj)), (patch, crds.errors(obj))
    rg = cq["spec"]["resourceGroups"][0]
    short = {**rg, "flavors": [{**rg["flavors"][0], "resources": rg["flavors"][0]["resources"][:2]}]}
    obj = {**cq, "spec": {**cq["spec"], "resourceGroups": [short]}}
    assert any("same number of resources" in e for e in crds.errors(obj))
    nocohort = {**cq, "spec": {k: v for k, v in cq["spec"].items() if k != "cohortName"}}
    assert any("borrowingLimit must be nil when cohort is empty" in e for e in crds.errors(nocohort))
    assert crds.errors({**cq, "apiVersion": "kueue.x-k8s.io/v1"}) == ["no CRD serves ClusterQueue in kueue.x-k8s.io/v1"]
    wpc = next(d for d in docs if d["kind"] == "WorkloadPriorityClass")
    assert any("'value' is a required property" in e for e in crds.errors({k: v for k, v in wpc.items()
                                                                          if k != "value"}))
    lq = next(d for d in docs if d["kind"] == "LocalQueue")
    assert any("without metadata.namespace" in e
               for e in crds.errors({**lq, "metadata": {"name": lq["metadata"]["name"]}}))


def test_objects_are_written_in_the_version_the_crds_store(crds: Crds):
    for kind in K.KINDS:
        assert K.API in crds.versions(kind), (kind, crds.versions(kind))


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_exported_object_validates(name: str, crds: Crds):
    docs = check(CORPUS[name], crds)
    kinds = {d["kind"] for d in docs}
    assert {"ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue"} <= kinds


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(spec=cluster_specs())
def test_exports_of_generated_specs_validate(spec: ClusterSpec, crds: Crds):
    check(spec, crds)


def test_the_seed_policy_as_kueue_objects(crds: Crds):
    """The seed cluster (4 x ml.g5.12xlarge; john 3 nodes, borrow 50 %; smith 1 node, weight 100, borrow 100 %)."""
    docs = {(d["kind"], d["metadata"]["name"]): d for d in check(CORPUS["examples/seed/spec.yaml#0"], crds)}
    rf = docs[("ResourceFlavor", "ml.g5.12xlarge")]
    assert rf["spec"] == {"nodeLabels": {"node.kubernetes.io/instance-type": "ml.g5.12xlarge"}}
    assert ("Cohort", "demo") in docs
    john = docs[("ClusterQueue", "hyperpod-ns-john-clusterqueue")]["spec"]
    assert john["cohortName"] == "demo" and john["fairSharing"] == {"weight": 0}
    assert john["preemption"] == {"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "Never"},
                                  "withinClusterQueue": "LowerPriority"}
    assert john["resourceGroups"] == [{"coveredResources": ["nvidia.com/gpu", "cpu", "memory"], "flavors": [
        {"name": "ml.g5.12xlarge", "resources": [
            {"name": "nvidia.com/gpu", "nominalQuota": 12, "borrowingLimit": 6},
            {"name": "cpu", "nominalQuota": 144, "borrowingLimit": 72},
            {"name": "memory", "nominalQuota": "576Gi", "borrowingLimit": "288Gi"}]}]}]
    smith = docs[("ClusterQueue", "hyperpod-ns-smith-clusterqueue")]["spec"]
    assert smith["fairSharing"] == {"weight": 100}
    assert smith["resourceGroups"][0]["flavors"][0]["resources"][0] == {"name": "nvidia.com/gpu", "nominalQuota": 4,
                                                                         "borrowingLimit": 4}
    lq = docs[("LocalQueue", "hyperpod-ns-john-localqueue")]
    assert lq["metadata"]["namespace"] == "hyperpod-ns-john"
    assert lq["spec"] == {"clusterQueue": "hyperpod-ns-john-clusterqueue"}
    assert docs[("WorkloadPriorityClass", "inference-priority")]["value"] == 100
    assert docs[("WorkloadPriorityClass", "training-priority")]["value"] == 50
    assert ("Namespace", "hyperpod-ns-smith") in docs


def test_topology_levels_as_a_kueue_topology(crds: Crds):
    docs = {(d["kind"], d["metadata"]["name"]): d for d in check(CORPUS["tests/sim/test_topology.py:21"], crds)}
    assert docs[("Topology", "t")]["spec"] == {"levels": [
        {"nodeLabel": "fairpod.dev/topology-block"}, {"nodeLabel": "fairpod.dev/topology-rack"},
        {"nodeLabel": "kubernetes.io/hostname"}]}
    assert docs[("ResourceFlavor", "unit1")]["spec"]["topologyName"] == "t"
