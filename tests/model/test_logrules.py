"""Log rules as a job or priority class gives them (fairpod.model.logrules)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fairpod.model.logrules import STORED, LogRule, compile_pattern, effective, parse_flag, per_line


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


@pytest.mark.parametrize(("pattern", "says"), [
    (r"(a)\1", "invalid escape sequence"), (r"a(?=b)", "invalid perl operator"), (r"(?<!a)b", "invalid perl operator"),
    (r"(\pL{50}|\pN{50}){15}", "too costly to match"), (r"a{1001}", "invalid repetition size")])
def test_a_pattern_re2_cannot_match_in_linear_time_is_refused(pattern: str, says: str) -> None:
    with pytest.raises(ValueError, match=r".") as e:
        compile_pattern(pattern)
    assert says in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValidationError, match=says):
        parse_flag("r", "notify", pattern)


def test_a_stored_rule_is_not_checked_again() -> None:
    """A rule an older fairpod stored (it matched with Python's re) still loads; fairpod.server.core.transitions.logrules says it
    is not matched instead."""
    r = LogRule.model_validate({"name": "x", "pattern": r"(a)\1"}, context={STORED: True})
    assert r.pattern == r"(a)\1"


def test_patterns_match_line_by_line() -> None:
    rx = compile_pattern(r"^loss=(\S+)$")
    assert [m.group(1) for m in rx.finditer("loss=1\nx loss=2\nloss=3")] == ["1", "3"]
    assert compile_pattern(r"a\s+b").search("a\nb") is None  # never across a newline
    assert per_line(r"\Astep") and per_line(r"done\z") and not per_line(r"\\A") and not per_line("^step$")


def test_a_metric_rule_from_the_flag() -> None:
    r = parse_flag("diverged", "restart:metric>10:points=3", r"loss=(\S+)")
    assert (r.kind, r.metric_op, r.metric_threshold, r.metric_points) == ("metric", ">", 10.0, 3)
    assert r.describe() == r"3 readings in a row of /loss=(\S+)/ > 10"
    assert parse_flag("slow", "notify:metric<=80", r"(\d+) samples/sec").describe() == \
        r"a reading of /(\d+) samples/sec/ <= 80"


@pytest.mark.parametrize(("what", "pattern", "says"), [
    ("restart:metric=10", r"l=(\S+)", ":metric>NUMBER"), ("restart:metric>x", r"l=(\S+)", "'x' is not a number"),
    ("restart:metric>1:points=0", r"l=(\S+)", "greater than or equal to 1"),
    ("restart:metric>1:points=2.5", r"l=(\S+)", "not a whole number"),
    ("restart:metric>1", r"l=\S+", "captures its number in a group"), ("fail:points=3", "x", "goes with metric_op"),
    ("fail:metric>1:every=5", r"l=(\S+)", "no within_seconds or every_seconds"),
    ("fail:metric>1:metric>2", r"l=(\S+)", "given twice")])
def test_a_bad_metric_rule_says_what_is_wrong(what: str, pattern: str, says: str) -> None:
    with pytest.raises((ValueError, ValidationError), match=r".") as e:
        parse_flag("r", what, pattern)
    assert says in str(e.value), str(e.value)
