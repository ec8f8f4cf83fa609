"""The tree of groups as Kueue's hierarchical cohorts: a Cohort per group with ``parentName``, each team's
ClusterQueue in its group's Cohort; valid against Kueue's CRDs (../shared/kueue/crds/cohorts.yaml) and read back
as the same tree, with and without fairpod's annotations."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairpod.formats.kube.export import ExportError, export_kueue
from fairpod.formats.kube.importer import _kueue_part, import_kueue
from fairpod.model.spec import load_spec, parse_spec

from .crds import CRDS, Crds
from .test_kueue_roundtrip import strip_annotations, through_files

SPEC = load_spec(Path(__file__).resolve().parents[3] / "examples" / "groups" / "spec.yaml")


def cohorts(docs):
    return {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Cohort"}


def test_the_tree_as_cohorts_with_parent_names():
    docs = through_files(SPEC)
    c = cohorts(docs)
    assert set(c) == {"lab-cluster", "lab", "research", "ops"}
    assert c["lab"]["parentName"] == "lab-cluster" and "parentName" not in c["lab-cluster"]
    assert c["research"]["parentName"] == "lab" and c["ops"]["parentName"] == "lab"
    assert c["research"]["fairSharing"] == {"weight": 60} and c["ops"]["fairSharing"] == {"weight": 10}
    # research's subtree: nlp + vision = 4 nodes = 16 GPUs; 50 % of that may come from outside
    gpu = {r["name"]: r for r in c["research"]["resourceGroups"][0]["flavors"][0]["resources"]}["nvidia.com/gpu"]
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": 0, "borrowingLimit": 8}
    queues = {d["metadata"]["name"]: d["spec"]["cohortName"] for d in docs if d["kind"] == "ClusterQueue"}
    assert queues == {"hyperpod-ns-nlp-clusterqueue": "research", "hyperpod-ns-vision-clusterqueue": "research",
                      "hyperpod-ns-web-clusterqueue": "ops", "hyperpod-ns-infra-clusterqueue": "lab-cluster"}


@pytest.mark.skipif(not CRDS.is_dir(), reason=f"Kueue's CRDs are not at {CRDS}")
def test_every_object_of_the_tree_validates_against_the_crds():
    crds = Crds()
    errs = [e for d in through_files(SPEC) if d["kind"] != "Namespace" for e in crds.errors(d)]
    assert not errs, errs


def test_round_trip_of_the_tree():
    docs = through_files(SPEC)
    res = import_kueue(docs)
    assert res.from_annotations and res.spec == SPEC
    # from the Kueue fields alone: the same tree, weights, strategies and borrow limits
    derived = import_kueue(strip_annotations(docs))
    assert not derived.from_annotations
    assert [(g.name, g.parent, g.fair_share_weight, g.sharing.strategy, g.sharing.borrow_limit)
            for g in derived.spec.groups] == [
        (g.name, g.parent, g.fair_share_weight, g.sharing.strategy, g.sharing.borrow_limit) for g in SPEC.groups]
    assert {t.name: t.group for t in derived.spec.teams} == {t.name: t.group for t in SPEC.teams}
    assert _kueue_part(export_kueue(derived.spec).objects) == _kueue_part(docs)


def test_a_foreign_cohort_tree_is_read_as_groups():
    docs = strip_annotations(through_files(SPEC))
    for d in docs:  # a deeper tree written by hand: ops under research
        if d["kind"] == "Cohort" and d["metadata"]["name"] == "ops":
            d["spec"]["parentName"] = "research"
    res = import_kueue(docs)
    spec = res.spec
    assert spec.group("ops").parent == "research"
    # Kueue takes a Cohort's quota back for the queues below it: read as policy.hierarchical_reclaim
    assert spec.policy.hierarchical_reclaim and any("policy.hierarchical_reclaim on" in n for n in res.notes)


def test_a_group_named_as_the_cluster_is_refused():
    data = SPEC.model_dump(mode="json")
    data["groups"][0]["name"] = "lab-cluster"
    data["groups"][1]["parent"] = data["groups"][2]["parent"] = "lab-cluster"
    with pytest.raises(ExportError, match="groups: group 'lab-cluster' has the cluster's name"):
        export_kueue(parse_spec(data))
