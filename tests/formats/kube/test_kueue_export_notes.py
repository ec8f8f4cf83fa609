"""The export's notes on fairpod rules Kueue cannot hold: borrow limits lifted while no other team waits, a costly
reclaim's wait."""

from __future__ import annotations

import pytest

from fairpod.formats.kube.export import unexpressible
from fairpod.model.spec import parse_spec


def _spec(applies: str):
    return parse_spec({
        "cluster": {"name": "c", "instance_groups": [{"name": "g", "instance_type": "ml.p4d.24xlarge", "count": 2}]},
        "policy": {"borrow_limit_applies": applies},
        "teams": [{"name": "a", "quota": [{"instance_type": "ml.p4d.24xlarge", "count": 1}]},
                  {"name": "b", "quota": [{"instance_type": "ml.p4d.24xlarge", "count": 1}]}],
    })


@pytest.mark.parametrize("applies, noted", [("WhileOthersWait", True), ("Always", False)])
def test_lifted_borrow_limits_are_noted_as_not_expressible(applies, noted):
    assert any(n.startswith("borrow limits:") for n in unexpressible(_spec(applies))) is noted


def test_an_unknown_borrow_limit_mode_is_refused():
    with pytest.raises(ValueError, match="borrow_limit_applies"):
        _spec("Sometimes")


@pytest.mark.parametrize("wait, noted", [(None, True), (0, False)])
def test_a_costly_reclaims_wait_is_noted_as_not_expressible(wait, noted):
    spec = _spec("Always")
    if wait is not None:
        spec.policy.preemption_cost_wait_seconds = wait
    notes = [n for n in unexpressible(spec) if n.startswith("costly reclaim:")]
    assert bool(notes) is noted
    if noted:  # the default, in the words of the spec
        assert "at least 1800 s of work per accelerator" in notes[0] and "up to 900 s" in notes[0]


def test_fair_sharing_is_exported_with_fairpods_one_strategy():
    # Kueue's LessThanInitialShare preempts where fairpod does not (docs/policies.md, D5): the export leaves it out
    (note,) = [n for n in unexpressible(_spec("Always")) if n.startswith("fair share:")]
    assert "preemptionStrategies: [LessThanOrEqualToFinalShare]}" in note and "D5" in note


@pytest.mark.parametrize("ranking, own, noted", [("TaskRanking", False, True), ("TaskRanking", True, False),
                                                 ("FirstComeFirstServe", False, False)])
def test_reclaim_with_own_jobs_off_is_noted(ranking, own, noted):
    spec = _spec("Always")
    spec.policy.task_prioritization = ranking
    spec.policy.reclaim_with_own_jobs = own
    assert any(n.startswith("reclaim with own jobs:") for n in unexpressible(spec)) is noted
