"""Quota a group holds itself (``groups[].quota``) as a Kueue Cohort's own ``nominalQuota``, and a team that only
borrows (no quota, an absolute borrow limit) as a ClusterQueue with ``nominalQuota: 0`` and a ``borrowingLimit``:
export, import with and without fairpod's annotations, and Kueue's concept-doc example of a Cohort's shared quota
(kubernetes-sigs/kueue site/content/en/docs/concepts/cohort.md, "Configuring Quotas"), written here in GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairpod.formats.kube.export import export_kueue
from fairpod.formats.kube.importer import _kueue_part, import_kueue
from fairpod.governance import Workload, schedule
from fairpod.governance.build import snapshot_from_spec
from fairpod.governance.decisions import Admit
from fairpod.model.resources import Res
from fairpod.model.spec import load_spec, parse_spec

from .crds import CRDS, Crds
from .test_kueue_roundtrip import strip_annotations, through_files

IT = "ml.g5.12xlarge"


def spec_with_group_quota():
    data = load_spec(Path(__file__).resolve().parents[3] / "examples" / "groups" / "spec.yaml").model_dump(mode="json")
    data["cluster"]["instance_groups"][0]["count"] = 10
    data["groups"][1]["quota"] = [{"instance_type": IT, "count": 2}]  # research holds 2 nodes itself
    data["teams"].append({"name": "interns", "group": "research",  # no quota: borrows up to 8 GPUs
                          "sharing": {"strategy": "LendAndBorrow",
                                      "absolute_borrow_limits": [{"instance_type": IT, "accelerators": 8}]}})
    return parse_spec(data)


def flavors(docs, kind, name):
    d = next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)
    return {r["name"]: r for r in d["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}


def test_group_quota_and_a_team_that_only_borrows_as_kueue_objects():
    docs = through_files(spec_with_group_quota())
    gpu = flavors(docs, "Cohort", "research")["nvidia.com/gpu"]
    # research's own 8 GPUs, and 50 % of its subtree's 24 (nlp 8 + vision 8 + its own 8) from outside
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 12}
    assert flavors(docs, "ClusterQueue", "hyperpod-ns-interns-clusterqueue")["nvidia.com/gpu"] == {
        "name": "nvidia.com/gpu", "nominalQuota": 0, "borrowingLimit": 8}


@pytest.mark.skipif(not CRDS.is_dir(), reason=f"Kueue's CRDs are not at {CRDS}")
def test_they_validate_against_the_crds():
    crds = Crds()
    errs = [e for d in through_files(spec_with_group_quota()) if d["kind"] != "Namespace" for e in crds.errors(d)]
    assert not errs, errs


def test_export_import_round_trip_with_group_quota():
    spec = spec_with_group_quota()
    docs = through_files(spec)
    res = import_kueue(docs)
    assert res.from_annotations and res.spec == spec
    derived = import_kueue(strip_annotations(docs))  # the Kueue fields alone
    assert not derived.from_annotations
    research = derived.spec.group("research")
    assert research is not None and derived.spec.group_quota(research) == spec.group_quota(spec.group("research"))
    interns = derived.spec.team("interns")
    assert interns is not None and derived.spec.team_limits(interns.sharing.absolute_borrow_limits)[IT].acc == 8
    assert _kueue_part(export_kueue(derived.spec).objects) == _kueue_part(docs)


def test_the_imported_team_borrows_its_groups_quota():
    spec = import_kueue(strip_annotations(through_files(spec_with_group_quota()))).spec
    snap = snapshot_from_spec(spec)
    w = Workload("j", "interns", IT, 2, Res(4, 48000, 192 * 1024))
    snap.add_pending(w)
    (adm,) = [d for d in schedule(snap) if isinstance(d, Admit)]
    assert adm.lenders == (("group research", 8),) and "borrowing 8 accelerators from group research" in adm.reason


def test_kueues_cohort_with_shared_quota_and_a_queue_of_nominal_quota_0():
    # cohort.md: "hello-cohort" holds the quota; "my-cluster-queue" has nominalQuota 0 and no borrowingLimit, and
    # "may access the ... shared" quota of its Cohort
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"},
              "spec": {"nodeLabels": {"node.kubernetes.io/instance-type": IT}}}
    res = [{"name": "nvidia.com/gpu", "nominalQuota": 12}]
    cohort = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "hello-cohort"},
              "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                                           "flavors": [{"name": "default-flavor", "resources": res}]}]}}
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "my-cluster-queue"},
          "spec": {"cohortName": "hello-cohort", "resourceGroups": [
              {"coveredResources": ["nvidia.com/gpu"],
               "flavors": [{"name": "default-flavor", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 0}]}]}]}}
    spec = import_kueue([flavor, cohort, cq]).spec
    assert spec.policy.idle_resource_sharing == "Enabled"  # the root's quota: shared by every queue of the tree
    assert spec.capacity()[IT].acc == 12
    (team,) = spec.teams
    assert spec.team_limits(team.sharing.absolute_borrow_limits)[IT].acc == 12
    snap = snapshot_from_spec(spec)
    snap.add_pending(Workload("j", team.name, IT, 3, Res(4, 48000, 192 * 1024)))
    assert [d.job for d in schedule(snap) if isinstance(d, Admit)] == ["j"]


def test_a_nested_cohort_without_quota_of_its_own_borrows_from_its_parent():
    # A department's quota in one ClusterQueue and, in a child Cohort "sandbox" that holds no quota (no
    # resourceGroups), a queue of nominalQuota 0 without a borrowingLimit: in Kueue it borrows the department's idle
    # GPUs through its Cohort (kubernetes-sigs/kueue site/content/en/docs/concepts/cohort.md, "Hierarchical
    # Cohorts"). Read as a group with 500 % of no quota it could borrow nothing: a silently wrong import.
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gpu-flavor"},
              "spec": {"nodeLabels": {"node.kubernetes.io/instance-type": IT}}}

    def cq(name, cohort, gpus, **limits):
        r = {"name": "nvidia.com/gpu", "nominalQuota": gpus, **limits}
        return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
                "spec": {"cohortName": cohort, "resourceGroups": [
                    {"coveredResources": ["nvidia.com/gpu"],
                     "flavors": [{"name": "gpu-flavor", "resources": [r]}]}]}}

    root = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "department"}, "spec": {}}
    sandbox = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "sandbox"},
               "spec": {"parentName": "department"}}
    docs = [flavor, root, sandbox, cq("research", "department", 16), cq("interns", "sandbox", 0),
            cq("students", "sandbox", 0, borrowingLimit=4)]
    res = import_kueue(docs)
    spec = res.spec
    group = spec.group("sandbox")
    assert group is not None
    limits = spec.team_limits(group.sharing.absolute_borrow_limits)
    assert limits[IT].acc == 16, res.notes  # the whole type: no borrowingLimit on the Cohort
    snap = snapshot_from_spec(spec)
    interns = next(t.name for t in spec.teams if "interns" in t.name)
    students = next(t.name for t in spec.teams if "students" in t.name)
    snap.add_pending(Workload("a", interns, IT, 2, Res(4, 48000, 192 * 1024)))
    snap.add_pending(Workload("b", students, IT, 2, Res(4, 48000, 192 * 1024)))  # 8 GPUs > its limit of 4
    assert sorted(d.job for d in schedule(snap) if isinstance(d, Admit)) == ["a"]
