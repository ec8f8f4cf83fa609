"""The words of the cluster spec shared by its parts: name patterns, the enumerations of its fields, ``Strict``
(a model that refuses unknown fields and true/false for numbers) and ``did_you_mean`` for a misspelt name."""

from __future__ import annotations

import typing
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
TOPOLOGY_VALUE = r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"  # a rack's or block's name (a label value)
USER_PATTERN = r"^[a-z_][a-z0-9_-]*[$]?$"  # a POSIX login name


def did_you_mean(name: str, known: Any) -> str:
    """' (did you mean ml.g5.12xlarge?)' for an instance type written without SageMaker's ``ml.`` prefix or
    with a small typo; '' when nothing is close."""
    if f"ml.{name}" in known:
        return f" (did you mean ml.{name}?)"
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.85)
    return f" (did you mean {close[0]}?)" if close else ""


class TaskPrioritization(StrEnum):
    FIRST_COME_FIRST_SERVE = "FirstComeFirstServe"
    TASK_RANKING = "TaskRanking"


class IdleComputeAllocation(StrEnum):
    FAIR_SHARE = "FairShare"
    FIRST_COME_FIRST_SERVE = "FirstComeFirstServe"
    FAIR_SHARE_HISTORY = "FairShareHistory"  # FairShare, ranking borrowers by their decayed past borrowing too

    @property
    def fair_share(self) -> bool:
        return self in (IdleComputeAllocation.FAIR_SHARE, IdleComputeAllocation.FAIR_SHARE_HISTORY)


class Toggle(StrEnum):
    ENABLED = "Enabled"
    DISABLED = "Disabled"


class SharingStrategy(StrEnum):
    LEND_AND_BORROW = "LendAndBorrow"
    LEND = "Lend"
    DONT_LEND = "DontLend"


class PreemptTeamTasks(StrEnum):
    LOWER_PRIORITY = "LowerPriority"
    NEVER = "Never"
    # lower priority, and equal priority submitted later (Kueue's LowerOrNewerEqualPriority; governance.within_team)
    LOWER_OR_NEWER_EQUAL = "LowerOrNewerEqualPriority"


class NodeRecovery(StrEnum):
    AUTOMATIC = "Automatic"
    NONE = "None"


def no_bool_numbers(cls: type[BaseModel], data: Any) -> Any:
    """Refuse ``true``/``false`` for a number (pydantic would take them as 1 and 0)."""
    if isinstance(data, dict):
        for name, info in cls.model_fields.items():
            value = data.get(name)
            if isinstance(value, bool):
                kinds = set(typing.get_args(info.annotation)) or {info.annotation}
                if bool not in kinds and kinds & {int, float}:
                    raise ValueError(f"{name}: expected a number, got {str(value).lower()}")
    return data


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_enum_values=False, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data: Any) -> Any:
        return no_bool_numbers(cls, data)
