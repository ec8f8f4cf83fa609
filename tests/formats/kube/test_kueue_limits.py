"""Lending and absolute borrow limits as Kueue's ``lendingLimit`` and ``borrowingLimit``: exported, read back."""

from __future__ import annotations

from fairpod.formats.kube.export import export_kueue
from fairpod.formats.kube.importer import import_kueue
from fairpod.model.spec import parse_spec, seed_spec

from .test_kueue_roundtrip import strip_annotations, through_files

T = "ml.g5.12xlarge"


def _limited():
    doc = seed_spec().model_dump(mode="json")
    doc["teams"][0]["sharing"]["lending_limits"] = [{"instance_type": T, "count": 1}]
    doc["teams"][1]["sharing"]["absolute_borrow_limits"] = [{"instance_type": T, "accelerators": 2}]
    doc["teams"][1]["user_limits"] = {"max_running_accelerators": 8, "queue_order": "RoundRobin"}
    doc["teams"][1]["budgets"] = [{"instance_type": T, "period": "week", "accelerator_hours": 100}]
    return parse_spec(doc)


def _gpu(cq: dict, field: str) -> object:
    (group,) = cq["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    return next(r for r in flavor["resources"] if r["name"] == "nvidia.com/gpu").get(field)


def test_limits_in_the_kueue_fields_and_back():
    spec = _limited()
    cqs = {o["metadata"]["name"]: o for o in export_kueue(spec).objects if o["kind"] == "ClusterQueue"}
    john = next(v for k, v in cqs.items() if "john" in k)
    smith = next(v for k, v in cqs.items() if "smith" in k)
    assert _gpu(john, "lendingLimit") == 4 and _gpu(john, "borrowingLimit") == 6  # 12 x 50 %
    assert _gpu(smith, "lendingLimit") is None and _gpu(smith, "borrowingLimit") == 2  # 4 x 100 %, at most 2
    res = import_kueue(through_files(spec))
    assert res.from_annotations and res.spec == spec
    # the Kueue fields alone give the lending limit back (the absolute borrow limit reads as a borrow limit %)
    bare = import_kueue(strip_annotations(through_files(spec)))
    john_team = bare.spec.team("john")
    assert john_team is not None and john_team.sharing.lending_limits[0].count == 1  # 4 GPUs: one node
