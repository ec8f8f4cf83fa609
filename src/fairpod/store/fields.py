"""Checking caller-supplied field values before they reach the database (SQLite would store anything).

Each converter returns the value to store (an enum becomes its string) or raises ValueError/TypeError.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

Conv = Callable[[Any], Any]


def text(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__}")
    return v


def integer(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"expected an int, got {type(v).__name__}")
    return v


def number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise TypeError(f"expected a number, got {type(v).__name__}")
    return float(v)


def boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"expected a bool, got {type(v).__name__}")
    return v


def json_of(kind: type) -> Conv:
    """A JSON document of the given top-level type (dict or list) that survives a JSON round trip."""

    def conv(v: Any) -> Any:
        if not isinstance(v, kind):
            raise TypeError(f"expected a {kind.__name__}, got {type(v).__name__}")
        try:
            return json.loads(json.dumps(v, allow_nan=False))
        except (TypeError, ValueError) as e:
            raise ValueError(f"not JSON-serialisable: {e}") from None

    return conv


def str_list(v: Any) -> list[str]:
    if not isinstance(v, list | tuple) or not all(isinstance(x, str) for x in v):
        raise TypeError("expected a list of strings")
    return list(v)


def enum(e: type[StrEnum]) -> Conv:
    def conv(v: Any) -> str:
        try:
            return str(e(v))
        except ValueError:
            raise ValueError(f"{v!r} is not one of {', '.join(m.value for m in e)}") from None

    return conv


def optional(conv: Conv) -> Conv:
    return lambda v: None if v is None else conv(v)


def check(kind: str, convs: Mapping[str, Conv], changes: Mapping[str, Any]) -> dict[str, Any]:
    """Convert every field of ``changes``; raise ValueError naming the first bad or unknown field."""
    unknown = sorted(set(changes) - set(convs))
    if unknown:
        raise ValueError(f"unknown or read-only {kind} field(s): {', '.join(unknown)}")
    out: dict[str, Any] = {}
    for k, v in changes.items():
        try:
            out[k] = convs[k](v)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{kind}.{k}: {e}") from None
    return out
