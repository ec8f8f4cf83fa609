"""Log rules as a job or priority class gives them (fairpod.model.logrules)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fairpod.model.logrules import LogRule, effective, parse_flag


def test_the_flag_gives_each_form_of_rule() -> None:
    assert parse_flag("nan", "fail", "loss=nan").kind == "match"
    r = parse_flag("loss", "restart:every=600", "loss=")
    assert (r.kind, r.every_seconds, r.action) == ("every", 600.0, "restart")
    assert parse_flag("up", "notify:within=30", "^step").describe() == "no line matching /^step/ within 30 s of the start"


@pytest.mark.parametrize(("what", "pattern", "says"), [
    ("explode", "x", "notify"), ("fail:soon=3", "x", ":within=SECONDS"), ("fail:every=x", "x", "not a number"),
    ("fail", "(", "not a valid regular expression")])
def test_a_bad_rule_says_what_is_wrong(what: str, pattern: str, says: str) -> None:
    with pytest.raises((ValueError, ValidationError), match=r".") as e:
        parse_flag("r", what, pattern)
    assert says in str(e.value)


def test_a_rule_of_the_job_replaces_the_class_rule_of_its_name() -> None:
    cls = [LogRule(name="nan", pattern="nan", action="notify"), LogRule(name="cuda", pattern="CUDA", action="fail")]
    job = [LogRule(name="nan", pattern="loss=nan", action="fail")]
    assert [(r.name, r.action) for r in effective(job, cls)] == [("cuda", "fail"), ("nan", "fail")]
    with pytest.raises(ValidationError, match="not both"):
        LogRule(name="x", pattern="x", within_seconds=1, every_seconds=1)
