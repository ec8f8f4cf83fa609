"""A job spec checked against the cluster spec (fairpod.model.jobs.resolve_job): a message a user can act on for
each way a job cannot fit, and the request per replica as documented."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from fairpod.model.jobs import JobSpec, resolve_job
from fairpod.model.spec import parse_spec, seed_spec

SEED = seed_spec()


def job(**kw: Any) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "team": "john", "command": ["true"], **kw})


BAD = [
    ({"team": "nobody"}, "team 'nobody' does not exist (teams: john, smith)"),
    ({"instance_type": "ml.nope"}, "unknown instance type 'ml.nope'"),
    ({"accelerators": 0.5}, "a replica gets whole accelerators"),
    ({"accelerators": 5}, "each replica asks for 5 accelerators"),
    ({"priority": "urgent"}, "unknown priority class 'urgent'"),
    ({"min_runtime_seconds": 7200}, "min_runtime_seconds: 7200 s is above the cluster's maximum of 3600 s"),
]


@pytest.mark.parametrize(("fields", "words"), BAD, ids=[str(f) for f, _ in BAD])
def test_a_job_that_does_not_fit_the_cluster_says_why(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=None) as e:
        resolve_job(job(**fields), SEED)
    assert words in str(e.value), str(e.value)


@pytest.mark.parametrize("fields", [{"nodes": 0}, {"name": "Bad Name"}, {"command": "true"},
                                    {"max_runtime_seconds": 0}, {"hang_timeout_seconds": 5},
                                    {"hang_action": "explode"}, {"min_runtime_seconds": float("inf")}])
def test_malformed_fields_are_refused_before_any_check(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        job(**fields)


def test_whole_node_by_default_and_a_share_by_ratio() -> None:
    whole = resolve_job(job(), SEED)
    assert whole.instance_type == "ml.g5.12xlarge" and whole.request.acc == 4
    one = resolve_job(job(accelerators=1), SEED)
    assert one.request.acc == 1 and 0 < one.request.mcpu < whole.request.mcpu


def test_several_instance_types_need_one_named() -> None:
    data = seed_spec().model_dump(mode="json", exclude_defaults=True)
    data["cluster"]["instance_groups"].append({"name": "cpu", "instance_type": "ml.c5.xlarge", "count": 1})
    spec = parse_spec(data)
    with pytest.raises(ValueError, match="several instance types; name one with instance_type"):
        resolve_job(job(), spec)
    assert resolve_job(job(instance_type="ml.c5.xlarge"), spec).instance_type == "ml.c5.xlarge"
