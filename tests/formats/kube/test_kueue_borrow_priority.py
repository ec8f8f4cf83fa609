"""``policy.preempt_to_borrow`` (preempting to borrow by priority) as Kueue's ``borrowWithinCohort``: export,
CRD validation, import with and without fairpod's annotations, and a ClusterQueue written as Kueue's concept page
shows it (kubernetes-sigs/kueue site/content/en/docs/concepts/cluster_queue.md, "Preemption": ``reclaimWithinCohort:
Any``, ``borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairpod.formats.kube.export import export_kueue
from fairpod.formats.kube.importer import _kueue_part, import_kueue
from fairpod.model.spec import load_spec, parse_spec

from .crds import CRDS, Crds
from .test_kueue_roundtrip import strip_annotations, through_files

IT = "ml.g5.12xlarge"


def spec_preempting_to_borrow(threshold: int | None = 10):
    data = load_spec(Path(__file__).resolve().parents[3] / "examples" / "groups" / "spec.yaml").model_dump(mode="json")
    data["policy"].update({"task_prioritization": "TaskRanking", "idle_compute_allocation": "FirstComeFirstServe",
                           "preempt_to_borrow": "LowerPriority", "preempt_to_borrow_max_priority": threshold})
    return parse_spec(data)


def test_every_cluster_queue_says_borrow_within_cohort():
    docs = through_files(spec_preempting_to_borrow())
    cqs = [d for d in docs if d["kind"] == "ClusterQueue"]
    assert cqs and all(d["spec"]["preemption"]["borrowWithinCohort"] == {"policy": "LowerPriority",
                                                                         "maxPriorityThreshold": 10} for d in cqs)
    assert all(d["spec"]["preemption"]["reclaimWithinCohort"] == "Any" for d in cqs)
    no_limit = [d for d in through_files(spec_preempting_to_borrow(None)) if d["kind"] == "ClusterQueue"]
    assert all(d["spec"]["preemption"]["borrowWithinCohort"] == {"policy": "LowerPriority"} for d in no_limit)


@pytest.mark.skipif(not CRDS.is_dir(), reason=f"Kueue's CRDs are not at {CRDS}")
def test_they_validate_against_the_crds():
    crds = Crds()
    errs = [e for d in through_files(spec_preempting_to_borrow()) if d["kind"] != "Namespace"
            for e in crds.errors(d)]
    assert not errs, errs


def test_export_import_round_trip():
    spec = spec_preempting_to_borrow()
    docs = through_files(spec)
    assert import_kueue(docs).spec == spec
    derived = import_kueue(strip_annotations(docs))  # the Kueue fields alone
    p = derived.spec.policy
    assert (p.preempt_to_borrow, p.preempt_to_borrow_max_priority, p.idle_compute_allocation) == (
        "LowerPriority", 10, "FirstComeFirstServe")
    assert any("read as policy.preempt_to_borrow: LowerPriority with preempt_to_borrow_max_priority 10" in n
               for n in derived.notes)
    assert _kueue_part(export_kueue(derived.spec).objects) == _kueue_part(docs)


def test_kueues_concept_page_cluster_queue():
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"},
              "spec": {"nodeLabels": {"node.kubernetes.io/instance-type": IT}}}
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "team-a-cq"},
          "spec": {"cohortName": "team-ab", "resourceGroups": [
              {"coveredResources": ["nvidia.com/gpu"],
               "flavors": [{"name": "default-flavor", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}],
              "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority",
                             "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100}}}}
    other = {**cq, "metadata": {"name": "team-b-cq"}, "spec": {**cq["spec"], "preemption": {
        "reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}}}
    res = import_kueue([flavor, cq, other])
    p = res.spec.policy
    assert (p.preempt_to_borrow, p.preempt_to_borrow_max_priority) == ("LowerPriority", 100)
    assert p.idle_compute_allocation == "FirstComeFirstServe"
    assert any("fairpod's policy is one for the cluster" in n for n in res.notes)  # team-b-cq has none


def test_lower_or_newer_equal_priority_round_trip():
    data = spec_preempting_to_borrow().model_dump(mode="json")
    data["teams"][0]["preempt_team_tasks"] = "LowerOrNewerEqualPriority"
    spec = parse_spec(data)
    docs = through_files(spec)
    name = spec.teams[0].name
    cq = next(d for d in docs if d["kind"] == "ClusterQueue" and d["metadata"]["name"] == f"hyperpod-ns-{name}-clusterqueue")
    assert cq["spec"]["preemption"]["withinClusterQueue"] == "LowerOrNewerEqualPriority"
    derived = import_kueue(strip_annotations(docs)).spec
    assert derived.team(name).preempt_team_tasks == "LowerOrNewerEqualPriority"


@pytest.mark.parametrize("fallback, fungibility", [
    ("Borrow", None),
    ("TryNextInstanceType", {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor"}),
    ("PreemptionOverBorrowing", {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor",
                                 "preference": "PreemptionOverBorrowing"})])
def test_fallback_types_as_flavor_fungibility(fallback, fungibility):
    data = spec_preempting_to_borrow().model_dump(mode="json")
    data["policy"]["fallback_when_can_borrow"] = fallback
    docs = through_files(parse_spec(data))
    cqs = [d for d in docs if d["kind"] == "ClusterQueue"]
    assert all(d["spec"].get("flavorFungibility") == fungibility for d in cqs)
    assert import_kueue(strip_annotations(docs)).spec.policy.fallback_when_can_borrow == fallback
