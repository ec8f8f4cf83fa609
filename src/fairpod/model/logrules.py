"""Log rules over a job's replicas' output (HyperPod's ``logMonitoringConfiguration``), set per job or per
priority class. A rule has a regular expression and one of three forms:

- neither ``within_seconds`` nor ``every_seconds``: a line matching it is a fault (``nan`` loss, ``CUDA error``);
- ``within_seconds: S``: no line matching it within S seconds of the start is a fault (the job never got going);
- ``every_seconds: S``: no line matching it for S seconds is a fault (the loss lines stopped).

Each has an ``action``: ``notify`` (an event), ``restart_in_place`` (that replica's process is restarted on its
node, as :mod:`fairpod.server.core.transitions.restarts` does for a crash; a rule over the time since the start or the last line,
which no replica alone broke, restarts the job), ``restart`` (the job restarts whole: auto-resume, counts against
``max_retry``) or ``fail``. ``fairpod.server.core.transitions.logrules`` applies them.

Patterns are RE2's (``google-re2``), not Python's ``re``: RE2 matches in time linear in the line whatever the
pattern, so no pattern a member submits can keep the control plane busy (``(a+)+$`` against a line of ``a``s
and a ``!`` takes Python's ``re`` time doubling per character). A pattern RE2 cannot compile (backreferences,
lookahead, lookbehind) or whose compiled program exceeds ``MAX_PROGRAM`` bytes is refused at submit, in one line
naming the rule. A line is matched on its first ``LINE_MAX`` bytes; ``^`` and ``$`` mark its start and end."""

from __future__ import annotations

import re
from typing import Any, Literal

import re2  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

RULE_NAME = r"^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$"
Action = Literal["notify", "restart_in_place", "restart", "fail"]
MetricOp = Literal[">", ">=", "<", "<="]
CROSSES = {">": lambda v, t: v > t, ">=": lambda v, t: v >= t, "<": lambda v, t: v < t, "<=": lambda v, t: v <= t}


class LogRule(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(pattern=RULE_NAME, max_length=40)
    pattern: str = Field(min_length=1, max_length=1000, description="a regular expression (RE2 syntax: no "
                         "backreferences or lookaround) a line is searched for")
    action: Action = "notify"
    within_seconds: float | None = Field(default=None, gt=0, le=7 * 86400,
                                         description="a matching line must come within this long of the start")
    every_seconds: float | None = Field(default=None, gt=0, le=7 * 86400,
                                        description="a matching line must come at least this often")
    metric_op: MetricOp | None = Field(default=None, description="a reading (the pattern's first group, a "
                                       "number) that compares so with metric_threshold counts")
    metric_threshold: float | None = Field(default=None, description="the threshold of metric_op")
    metric_points: int = Field(default=1, ge=1, le=10_000, description="readings in a row of one replica that "
                               "cross the threshold before the rule fires")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str, info: ValidationInfo) -> str:
        if not (info.context or {}).get(STORED):  # a rule stored by an older fairpod: see fairpod.server.core.transitions.logrules
            compile_pattern(v)
        return v

    @model_validator(mode="after")
    def _one_form(self) -> LogRule:
        if self.within_seconds is not None and self.every_seconds is not None:
            raise ValueError(f"log rule {self.name}: give within_seconds or every_seconds, not both")
        if (self.metric_op is None) != (self.metric_threshold is None):
            raise ValueError(f"log rule {self.name}: give metric_op and metric_threshold together")
        if self.metric_op is not None and (self.within_seconds is not None or self.every_seconds is not None):
            raise ValueError(f"log rule {self.name}: a metric rule has no within_seconds or every_seconds (give "
                             "two rules)")
        if self.metric_op is None and self.metric_points != 1:
            raise ValueError(f"log rule {self.name}: metric_points goes with metric_op and metric_threshold")
        if self.metric_op is not None and _groups(self.pattern) == 0:
            raise ValueError(f"log rule {self.name}: a metric rule's pattern captures its number in a group, e.g. "
                             "'loss=(\\S+)'")
        return self

    @property
    def kind(self) -> Literal["match", "within", "every", "metric"]:
        if self.within_seconds is not None:
            return "within"
        if self.metric_op is not None:
            return "metric"
        return "every" if self.every_seconds is not None else "match"

    def describe(self) -> str:
        if self.kind == "metric":
            n = f"{self.metric_points} readings in a row" if self.metric_points > 1 else "a reading"
            return f"{n} of /{self.pattern}/ {self.metric_op} {self.metric_threshold:g}"
        if self.kind == "within":
            return f"no line matching /{self.pattern}/ within {self.within_seconds:g} s of the start"
        if self.kind == "every":
            return f"no line matching /{self.pattern}/ for {self.every_seconds:g} s"
        return f"a line matching /{self.pattern}/"


STORED = "stored"  # validation context of what the store holds: checked when it was submitted
MAX_PROGRAM = 1 << 20  # bytes RE2 may use for one compiled pattern: bounds the cost of a byte of a line
LINE_MAX = 16 * 1024  # bytes of a line matched: the rest of a longer line is not looked at
_WHOLE_TEXT = re.compile(r"(?<!\\)(?:\\\\)*\\[Az]")  # \A or \z: the start or end of the text, not of a line


def compile_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2 as log rules match it: over many lines at once, ``^`` and ``$`` at each line's
    start and end, never across a newline; ValueError in one line when RE2 refuses it."""
    opts = re2.Options()
    opts.log_errors = False
    opts.max_mem = MAX_PROGRAM
    opts.never_nl = True
    try:
        return re2.compile("(?m)" + pattern, opts)
    except re2.error as e:
        why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        if "too large" in why:
            raise ValueError(f"pattern {pattern!r} is too costly to match: RE2 needs more than "
                             f"{MAX_PROGRAM >> 20} MiB for it (fewer or smaller counted repetitions)") from None
        raise ValueError(f"pattern {pattern!r} is not a valid regular expression for a log rule: {why} (log rules "
                         "are RE2 patterns, matched in time linear in the line: no backreferences, lookahead or "
                         "lookbehind)") from None


def _groups(pattern: str) -> int | None:
    """How many groups the pattern captures; None when RE2 refuses it (a stored rule: not matched anyway)."""
    try:
        return int(compile_pattern(pattern).groups)
    except ValueError:
        return None


def per_line(pattern: str) -> bool:
    """Does the pattern name the start or end of the whole text (``\\A``, ``\\z``)? Then it is matched line by
    line, each line its own text, as a reader of one line expects."""
    return _WHOLE_TEXT.search(pattern) is not None


def parse_flag(name: str, what: str, pattern: str) -> LogRule:
    """``--log-rule NAME ACTION[:within=S|:every=S|:metric>X[:points=N]] REGEX`` as a rule; ValueError in the
    flag's words."""
    action, *parts = what.split(":")
    fields: dict[str, object] = {"name": name, "action": action, "pattern": pattern}
    for part in parts:
        key, _, value = part.partition("=")
        m = re.fullmatch(r"metric\s*(>=|<=|>|<)\s*(\S+)", part)
        if m:
            fields["metric_op"], value = m.group(1), m.group(2)
            key = "metric_threshold"
        elif key in ("within", "every"):
            key = f"{key}_seconds"
        elif key == "points":
            key = "metric_points"
        else:
            raise ValueError(f"{what!r}: after the action give :within=SECONDS, :every=SECONDS or "
                             ":metric>NUMBER (>, >=, <, <=) with :points=N readings in a row")
        if key in fields:
            raise ValueError(f"{what!r}: {part.partition('=')[0]!r} is given twice")
        try:
            fields[key] = int(value) if key == "metric_points" else float(value)
        except ValueError:
            what_is = "a whole number of readings" if key == "metric_points" else (
                "a number" if key == "metric_threshold" else "a number of seconds")
            raise ValueError(f"{what!r}: {value!r} is not {what_is}") from None
    return LogRule.model_validate(fields)


def effective(job_rules: list[LogRule], class_rules: list[LogRule]) -> list[LogRule]:
    """The rules that apply to a job: its priority class's, then its own (a rule of the job replaces the
    class's rule of the same name)."""
    own = {r.name for r in job_rules}
    return [r for r in class_rules if r.name not in own] + list(job_rules)
