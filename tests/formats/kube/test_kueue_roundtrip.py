"""export → import is the identity on every spec of examples/ and the tests and on generated specs; the Kueue
fields alone (no fairpod annotation) give back the same Kueue objects; edited Kueue fields win."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from fairpod.formats.kube import kueue as K
from fairpod.formats.kube.export import FILES, export_kueue, render
from fairpod.formats.kube.importer import _kueue_part, import_kueue, spec_yaml
from fairpod.formats.kube.manifest import quantity
from fairpod.model.spec import ClusterSpec, parse_spec

from .specs import cluster_specs, corpus

CORPUS = corpus()


def through_files(spec: ClusterSpec) -> list[Any]:
    """Export, render to YAML text as written to disk, and read the documents back."""
    docs: list[Any] = []
    for text in render(export_kueue(spec)).values():
        docs += [d for d in yaml.safe_load_all(text) if d is not None]
    return docs


def strip_annotations(docs: list[Any]) -> list[Any]:
    """The objects without fairpod's annotations, except the size of a custom instance type's node (the
    cluster's hardware, which no Kueue object describes)."""
    out = copy.deepcopy(docs)
    for d in out:
        anns = d.get("metadata", {}).get("annotations") or {}
        for k in [k for k in anns if k.startswith(K.ANN) and k != K.ANN_INSTANCE_TYPE]:
            del anns[k]
    return out


def test_the_corpus_holds_the_examples_and_the_test_specs():
    names = set(CORPUS)
    assert {"examples/seed/spec.yaml#0", "examples/itp/spec.yaml#0", "fairpod.model.spec.seed_spec",
            "benchmarks/kueue_baseline.py:spec", "tests/governance/helpers.py:make", "tests/sim/test_trace.py:85"} \
        <= names


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_export_import_is_the_identity_on_every_spec(name: str):
    spec = CORPUS[name]
    res = import_kueue(through_files(spec))
    assert res.from_annotations, res.notes
    assert res.spec == spec
    # and the spec YAML printed by 'fairpod import kueue' reads back as the same spec
    assert parse_spec(yaml.safe_load(spec_yaml(res.spec))) == spec


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_the_kueue_fields_alone_give_back_the_same_objects(name: str):
    docs = through_files(CORPUS[name])
    res = import_kueue(strip_annotations(docs))
    assert not res.from_annotations
    assert any("no fairpod.dev/ annotations" in n for n in res.notes)
    if CORPUS[name].cluster.topology_levels:
        # the nodes' domains are node labels, not Kueue objects: the Topology is reported, not read
        assert any(n.startswith("Topology ") and "nodes' labels" in n for n in res.notes), res.notes
        docs = [{**d, "spec": {k: v for k, v in d["spec"].items() if k != "topologyName"}}
                if d["kind"] == "ResourceFlavor" else d for d in docs if d["kind"] != "Topology"]
    assert _kueue_part(export_kueue(res.spec).objects) == _kueue_part(docs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster_specs())
def test_round_trip_over_generated_specs(spec: ClusterSpec):
    docs = through_files(spec)
    # render writes with libyaml's emitter where PyYAML has it: the text yaml.safe_dump writes
    for fname, text in render(ex := export_kueue(spec)).items():
        assert text.split("\n", 1)[1].endswith("---\n".join(
            yaml.safe_dump(d, sort_keys=False, default_flow_style=False, width=120) for d in ex.objects
            if d["kind"] in FILES[fname])), fname
    res = import_kueue(docs)
    assert res.from_annotations and res.spec == spec
    derived = import_kueue(strip_annotations(docs)).spec
    assert _kueue_part(export_kueue(derived).objects) == _kueue_part(docs)
    # what Kueue expresses survives without the annotations: teams, resolved quotas, weights, priorities
    assert [t.name for t in derived.teams] == [t.name for t in spec.teams]
    for a, b in zip(derived.teams, spec.teams, strict=True):
        assert derived.team_quota(a) == spec.team_quota(b)
        assert a.fair_share_weight == b.fair_share_weight
    if spec.policy.task_prioritization == "TaskRanking":
        assert derived.policy.priority_classes == spec.policy.priority_classes


def seed_docs() -> list[dict[str, Any]]:
    return through_files(CORPUS["examples/seed/spec.yaml#0"])


def cq(docs: list[dict[str, Any]], team: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == "ClusterQueue" and d["metadata"]["name"] == K.cluster_queue(team))


def test_an_edited_kueue_field_wins_over_the_annotations():
    docs = seed_docs()
    res = {r["name"]: r for r in cq(docs, "john")["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    res["nvidia.com/gpu"].update(nominalQuota=8, borrowingLimit=4)  # john: 2 nodes instead of 3, still 50 %
    res["cpu"].update(nominalQuota="96", borrowingLimit="48000m")
    res["memory"].update(nominalQuota="384Gi", borrowingLimit="192Gi")
    cq(docs, "john")["spec"]["preemption"]["withinClusterQueue"] = "Never"
    out = import_kueue(docs)
    assert not out.from_annotations
    assert any("edited since" in n for n in out.notes)
    teams = {t.name: t for t in out.spec.teams}
    assert teams["john"].quota[0].count == 2 and teams["john"].sharing.borrow_limit == 50
    assert teams["john"].preempt_team_tasks == "Never"
    assert teams["smith"] == CORPUS["examples/seed/spec.yaml#0"].team("smith")
    # policy settings Kueue has no field for still come from the annotation
    pol = out.spec.policy.model_dump(exclude={"task_prioritization", "priority_classes", "idle_resource_sharing"})
    assert pol == CORPUS["examples/seed/spec.yaml#0"].policy.model_dump(
        exclude={"task_prioritization", "priority_classes", "idle_resource_sharing"})
    # what Kueue has no field for still comes from the annotations: the 4 nodes of group "workers"
    assert out.spec.cluster.instance_groups[0].name == "workers" and out.spec.cluster.instance_groups[0].count == 4


def test_an_edit_beyond_the_capacity_is_one_clear_error():
    docs = seed_docs()
    for r in cq(docs, "smith")["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:
        r["nominalQuota"] = {"nvidia.com/gpu": 12, "cpu": 144, "memory": "576Gi"}[r["name"]]
    with pytest.raises(ValueError, match=r"the quotas for ml.g5.12xlarge add up to 24 accelerators"):
        import_kueue(docs)


def test_first_come_first_serve_keeps_the_weights_but_exports_equal_priorities():
    data = CORPUS["examples/seed/spec.yaml#0"].model_dump(mode="json")
    data["policy"]["task_prioritization"] = "FirstComeFirstServe"
    spec = parse_spec(data)
    docs = through_files(spec)
    assert {d["value"] for d in docs if d["kind"] == "WorkloadPriorityClass"} == {0}
    assert {cq(docs, t)["spec"]["preemption"]["withinClusterQueue"] for t in ("john", "smith")} == {"Never"}
    assert import_kueue(docs).spec == spec


def test_idle_resource_sharing_lends_the_unallocated_capacity():
    data = CORPUS["examples/seed/spec.yaml#0"].model_dump(mode="json")
    data["policy"]["idle_resource_sharing"] = "Enabled"
    data["cluster"]["instance_groups"][0]["count"] = 6  # 2 nodes no team has as quota
    spec = parse_spec(data)
    docs = through_files(spec)
    un = next(d for d in docs if d["kind"] == "ClusterQueue" and d["metadata"]["name"] == K.UNALLOCATED)
    assert "namespaceSelector" not in un["spec"]  # no namespace may submit to it: it only lends
    res = {r["name"]: r for r in un["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    assert res["nvidia.com/gpu"] == {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 0}
    assert import_kueue(docs).spec == spec
    derived = import_kueue(strip_annotations(docs))
    assert derived.spec.policy.idle_resource_sharing == "Enabled"
    assert derived.spec.cluster.instance_groups[0].count == 6  # sized from quotas + unallocated


def test_sharing_strategies_become_lending_and_borrowing_limits():
    data = CORPUS["examples/seed/spec.yaml#0"].model_dump(mode="json")
    data["teams"][0]["sharing"] = {"strategy": "DontLend"}
    data["teams"][1]["sharing"] = {"strategy": "Lend"}
    docs = through_files(parse_spec(data))
    john = cq(docs, "john")["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    smith = cq(docs, "smith")["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert all(quantity(r["lendingLimit"], "") == 0 and quantity(r["borrowingLimit"], "") == 0 for r in john)
    assert all("lendingLimit" not in r and quantity(r["borrowingLimit"], "") == 0 for r in smith)
    derived = import_kueue(strip_annotations(docs)).spec
    assert [t.sharing.strategy for t in derived.teams] == ["DontLend", "Lend"]


def test_an_instance_type_added_after_the_export_gets_a_group_sized_from_its_quota():
    docs = seed_docs()
    docs.append({"apiVersion": K.API, "kind": "ResourceFlavor", "metadata": {"name": "ml.p5.48xlarge"},
                 "spec": {"nodeLabels": {K.INSTANCE_LABEL: "ml.p5.48xlarge"}}})
    rg = cq(docs, "smith")["spec"]["resourceGroups"][0]
    rg["flavors"].append({"name": "ml.p5.48xlarge", "resources": [
        {"name": "nvidia.com/gpu", "nominalQuota": 16, "borrowingLimit": 16},
        {"name": "cpu", "nominalQuota": 384, "borrowingLimit": 384},
        {"name": "memory", "nominalQuota": "4Ti", "borrowingLimit": "4Ti"}]})
    out = import_kueue(docs)
    groups = {g.instance_type: (g.name, g.count) for g in out.spec.cluster.instance_groups}
    assert groups == {"ml.g5.12xlarge": ("workers", 4), "ml.p5.48xlarge": ("ml-p5-48xlarge", 2)}
    assert out.spec.team("smith").quota[1].count == 2  # type: ignore[union-attr]
    assert any("2 x ml.p5.48xlarge, sized from the quotas" in n for n in out.notes)


def test_an_edit_keeps_the_team_settings_kueue_has_no_field_for():
    data = CORPUS["examples/seed/spec.yaml#0"].model_dump(mode="json")
    data["teams"][1].update(run_as="trainer", sharing={"strategy": "Lend", "borrow_limit": 200})
    docs = through_files(parse_spec(data))
    cq(docs, "john")["spec"]["fairSharing"]["weight"] = 5  # an edit elsewhere
    out = import_kueue(docs)
    assert not out.from_annotations and out.spec.team("john").fair_share_weight == 5  # type: ignore[union-attr]
    smith = out.spec.team("smith")
    assert smith is not None and smith.run_as == "trainer" and smith.sharing.borrow_limit == 200
