"""The cluster spec's validation (fairpod.model.spec): every problem is reported, one message each, naming its
field, and a valid spec resolves quotas and capacity as documented."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairpod.model.spec import SpecError, parse_spec, seed_spec

SEED: dict[str, Any] = seed_spec().model_dump(mode="json", exclude_defaults=True)


def mutate(path: str, value: Any) -> dict[str, Any]:
    """The seed spec with ``path`` (dots and [i]) set to ``value`` (``...`` deletes it)."""
    data = copy.deepcopy(SEED)
    parts = path.replace("]", "").replace("[", ".").split(".")
    node: Any = data
    for p in parts[:-1]:
        node = node[int(p)] if p.isdigit() else node.setdefault(p, {})
    last: Any = int(parts[-1]) if parts[-1].isdigit() else parts[-1]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return data


def problems(data: Any) -> list[str]:
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    return e.value.problems


# (field changed, its new value, the words the one message about it must contain)
BAD = [
    ("cluster.instance_groups[0].instance_type", "ml.nope", "cluster.instance_groups[0].instance_type: unknown instance type 'ml.nope'"),
    ("cluster.instance_groups[0].count", -1, "cluster.instance_groups[0].count"),
    ("cluster.instance_groups[0].count", True, "cluster.instance_groups[0].count"),
    ("cluster.instance_groups[0].deep_health_checks", ["Bogus"], "unknown check 'Bogus'"),
    ("cluster.name", "Has Spaces", "cluster.name: must be lower-case letters"),
    ("teams[0].quota[0].instance_type", "ml.nope", "teams[0].quota[0].instance_type: unknown instance type"),
    ("teams[0].quota[0].count", 100, "teams[*].quota: the quotas for ml.g5.12xlarge add up to"),
    ("teams[0].quota[0].accelerators", 4, "teams[0].quota[0]: give either count or accelerators, not both"),
    ("teams[0].quota[0].count", ..., "teams[0].quota[0]: give count, accelerators, vcpu or memory_gib"),
    ("teams[0].fair_share_weight", float("nan"), "teams[0].fair_share_weight"),
    ("teams[0].sharing.strategy", "Sometimes", "teams[0].sharing.strategy"),
    ("teams[0].colour", "blue", "teams[0].colour: unknown field"),
    ("teams[1].name", SEED["teams"][0]["name"], "teams: duplicate team"),
    ("policy.task_prioritization", "Random", "policy.task_prioritization"),
    ("policy.priority_classes", [{"name": "a", "weight": 1}, {"name": "a", "weight": 2}],
     "policy.priority_classes: 'a' is defined 2 times"),
    ("policy.max_min_runtime_seconds", -5, "policy.max_min_runtime_seconds"),
    ("cluster.checkpoint_dir", "ckpt", "cluster.checkpoint_dir: must be an absolute path"),
    ("cluster.checkpoint_dir", "/a/../b", "cluster.checkpoint_dir: must be an absolute path"),
]


@pytest.mark.parametrize(("path", "value", "words"), BAD, ids=[f"{p}={v!r}" for p, v, _ in BAD])
def test_each_bad_field_is_one_message_naming_it(path: str, value: Any, words: str) -> None:
    found = problems(mutate(path, value))
    assert any(words in p for p in found), found
    assert all("\n" not in p for p in found)


def test_every_problem_is_reported_not_only_the_first() -> None:
    data = mutate("cluster.instance_groups[0].instance_type", "ml.nope")
    data["teams"][0]["quota"][0]["instance_type"] = "ml.other"
    data["teams"].append(copy.deepcopy(data["teams"][1]))
    found = problems(data)
    assert len(found) >= 3, found


@pytest.mark.parametrize("top", [None, [], "text", 3])
def test_a_spec_that_is_not_a_mapping(top: Any) -> None:
    assert problems(top) == ["(top level): the spec must be a mapping with cluster, policy, teams …"]


def test_the_seed_spec_resolves_quota_and_capacity() -> None:
    spec = parse_spec(SEED)
    cap = spec.capacity()["ml.g5.12xlarge"]
    assert cap.acc == 16  # 4 nodes x 4 GPUs
    total = sum(spec.team_quota(t)["ml.g5.12xlarge"].acc for t in spec.teams)
    assert total <= cap.acc


@given(count=st.integers(min_value=0, max_value=64), quota=st.integers(min_value=0, max_value=64))
def test_quota_above_capacity_is_refused_and_at_or_below_accepted(count: int, quota: int) -> None:
    data = copy.deepcopy(SEED)
    data["cluster"]["instance_groups"][0]["count"] = count
    data["teams"] = [data["teams"][0]]
    data["teams"][0]["quota"] = [{"instance_type": "ml.g5.12xlarge", "count": quota}]
    if quota <= count:
        assert parse_spec(data).team_quota(parse_spec(data).teams[0])["ml.g5.12xlarge"].acc == 4 * quota
    else:
        assert any("add up to" in p for p in problems(data))
