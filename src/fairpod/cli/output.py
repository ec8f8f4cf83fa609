"""Printing results: ``-o table`` (aligned columns for people) or ``-o json`` (for scripts)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any


def add_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=["table", "json"], default="table", help="output format")


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=False, default=str))


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict):
        return ",".join(f"{k}:{fmt(x)}" for k, x in v.items()) or "-"
    if isinstance(v, list):
        return ",".join(fmt(x) for x in v) or "-"
    return str(v)


def ago(ts: float | None) -> str:
    if ts is None:
        return "-"
    s = max(0, int(time.time() - ts))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h"


def table(rows: Sequence[dict[str, Any]], cols: Sequence[tuple[str, str]]) -> None:
    """Print rows as aligned columns; ``cols`` is (key, header)."""
    cells = [[h for _, h in cols]] + [[fmt(r.get(k)) for k, _ in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if not rows:
        print("(none)")
