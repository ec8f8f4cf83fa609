"""Elastic job fields: 1 <= min_nodes <= max_nodes, nodes is the minimum, max within the cluster's nodes."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from fairpod.model.jobs import JobSpec, resolve_job
from fairpod.model.spec import seed_spec


def job(**kw: Any) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "team": "john", "command": ["true"], **kw})


@pytest.mark.parametrize(("fields", "nodes", "lo", "hi"), [
    ({"min_nodes": 2, "max_nodes": 4}, 2, 2, 4),
    ({"max_nodes": 3}, 1, 1, 3),  # the minimum: nodes, by default 1
    ({"nodes": 2, "max_nodes": 3}, 2, 2, 3),
    ({"nodes": 2, "min_nodes": 2, "max_nodes": 2}, 2, 2, 2),  # a range of one: a job of a fixed size
])
def test_elastic_fields(fields: dict[str, Any], nodes: int, lo: int, hi: int) -> None:
    j = job(**fields)
    assert (j.nodes, j.min_nodes, j.max_nodes, j.elastic) == (nodes, lo, hi, hi > lo)
    assert JobSpec.model_validate(j.model_dump()) == j  # as stored and read back


@pytest.mark.parametrize(("fields", "words"), [
    ({"min_nodes": 3, "max_nodes": 2}, "min_nodes 3 is more than max_nodes 2"),
    ({"min_nodes": 2}, "min_nodes needs max_nodes"),
    ({"nodes": 2, "min_nodes": 3, "max_nodes": 4}, "nodes 2 and min_nodes 3 differ"),
    ({"min_nodes": 0, "max_nodes": 2}, "greater than or equal to 1"),
])
def test_bad_elastic_fields_are_refused_in_one_message(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError) as e:
        job(**fields)
    assert words in str(e.value)


def test_max_nodes_within_the_cluster() -> None:
    spec = seed_spec()  # 4 ml.g5.12xlarge nodes
    resolve_job(job(min_nodes=1, max_nodes=4), spec)
    with pytest.raises(ValueError, match="max_nodes 5 is more than the 4 ml.g5.12xlarge nodes"):
        resolve_job(job(min_nodes=1, max_nodes=5), spec)
