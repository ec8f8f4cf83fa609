"""Printing results: ``-o table`` (aligned columns for people), ``-o json`` or ``-o yaml`` (for scripts)."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any

FORMATS = ["table", "json", "yaml"]


def add_output(p: argparse.ArgumentParser, formats: Sequence[str] = FORMATS) -> None:
    p.add_argument("-o", "--output", choices=list(formats), default=formats[0],
                   help=f"output format: {', '.join(formats)} (default %(default)s)")


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=False, default=str))


def emit_yaml(data: Any) -> None:
    import yaml  # only for -o yaml: it costs an import the other outputs do not pay

    sys.stdout.write(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False,
                                    allow_unicode=True))


def emit(data: Any, output: str) -> bool:
    """Print ``data`` for -o json / -o yaml; False for -o table (the caller prints its table)."""
    if output == "json":
        emit_json(data)
        return True
    if output == "yaml":
        emit_yaml(data)
        return True
    return False


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


def natural(name: str) -> tuple[Any, ...]:
    """Sort key: pool-2 before pool-10."""
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name))


def plural(n: float, word: str) -> str:
    """'1 accelerator', '4 accelerators', '0.25 nodes'."""
    return f"{n:g} {word}{'' if n == 1 else 's'}"


def nodes_of(acc: int, per_node: int | None) -> str:
    """'3 nodes' for 12 accelerators of 4 per node; '' when the node size is unknown."""
    if not per_node:
        return ""
    n = acc / per_node
    text = f"{n:g}" if n != int(n) else str(int(n))
    return f"{text} node{'' if n == 1 else 's'}"


def acc_nodes(acc: int, per_node: int | None, itype: str = "") -> str:
    """'12 acc (3 nodes)': accelerators, with the nodes they make where the node size is known; '14 partitions'
    for a MIG-partitioned instance type (``ml.p5.48xlarge.mig-1g.10gb``)."""
    if not acc:
        return "0"
    if re.search(r"\.mig-[0-9]+g\.[0-9]+gb$", itype):
        return f"{acc} partition{'' if acc == 1 else 's'}"
    nodes = nodes_of(acc, per_node)
    return f"{acc} acc ({nodes})" if nodes else f"{acc} acc"


_BORROW = r"borrowing (\d+) accelerators from (.+)$"
_LENDER = r"([a-z0-9-]+) \((\d+)\)"


def reason_in_units(reason: str | None, per_node: int | None) -> str | None:
    """'admitted, borrowing 4 accelerators from john (4)' -> '... borrowing 4 accelerators (1 node) from john'."""
    m = re.search(_BORROW, reason or "") if per_node else None
    if m is None or reason is None:
        return reason
    lenders = re.findall(_LENDER, m.group(2))
    nodes = nodes_of(int(m.group(1)), per_node)
    if len(lenders) == 1:
        who = lenders[0][0]
    elif lenders:
        who = ", ".join(f"{name} ({n} acc, {nodes_of(int(n), per_node)})" for name, n in lenders)
    else:
        who = m.group(2)
    return f"{reason[:m.start()]}borrowing {plural(int(m.group(1)), 'accelerator')} ({nodes}) from {who}"


def table(rows: Sequence[dict[str, Any]], cols: Sequence[tuple[str, str]]) -> None:
    """Print rows as aligned columns; ``cols`` is (key, header)."""
    cells = [[h for _, h in cols]] + [[fmt(r.get(k)) for k, _ in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if not rows:
        print("(none)")
