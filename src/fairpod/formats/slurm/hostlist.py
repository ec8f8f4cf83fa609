"""Slurm host lists: ``workers-[0-3,7],login`` <-> ``["workers-0", …, "workers-7", "login"]``.

``compress`` keeps the order it is given (the first host is the job's first node, where the batch script
runs) and only folds runs of consecutive numbers with the same prefix and width.
"""

from __future__ import annotations

import re

_TAIL = re.compile(r"^(.*?)(\d+)$")


class HostlistError(ValueError):
    pass


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in host list {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise HostlistError(f"unbalanced '[' in host list {text!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_one(item: str) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", item)
    if m is None:
        if "[" in item or "]" in item:
            raise HostlistError(f"bad host list item {item!r}")
        return [item]
    head, tail = item[: m.start()], item[m.end() :]
    out: list[str] = []
    for rng in m.group(1).split(","):
        lo, sep, hi = rng.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostlistError(f"bad range {rng!r} in host list item {item!r}")
        width = len(lo)
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a or b - a > 100_000:
            raise HostlistError(f"bad range {rng!r} in host list item {item!r}")
        for n in range(a, b + 1):
            out.extend(_expand_one(f"{head}{n:0{width}d}{tail}"))
    return out


def expand(text: str) -> list[str]:
    """Every host of a host list, in order (``a-[1-2],b`` -> ``a-1, a-2, b``)."""
    out: list[str] = []
    for item in _split_top(text):
        out.extend(_expand_one(item))
    return out


def compress(hosts: list[str]) -> str:
    """The shortest host list of ``hosts`` in their order (``a-1, a-2, a-3, b`` -> ``a-[1-3],b``)."""
    groups: list[tuple[str, list[tuple[int, int, int]], int]] = []  # prefix, [(first, last)], width
    for h in hosts:
        m = _TAIL.match(h)
        if m is None:
            groups.append((h, [], 0))
            continue
        prefix, num = m.group(1), m.group(2)
        n, width = int(num), len(num) if num.startswith("0") and len(num) > 1 else 0
        if groups and groups[-1][0] == prefix and groups[-1][1] and groups[-1][2] == width:
            ranges = groups[-1][1]
            if ranges[-1][1] + 1 == n:
                ranges[-1] = (ranges[-1][0], n, 0)
            else:
                ranges.append((n, n, 0))
        else:
            groups.append((prefix, [(n, n, 0)], width))
    parts = []
    for prefix, ranges, width in groups:
        if not ranges:
            parts.append(prefix)
            continue
        fmt = [f"{a:0{width}d}" + (f"-{b:0{width}d}" if b != a else "") for a, b, _ in ranges]
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            parts.append(f"{prefix}{fmt[0]}")
        else:
            parts.append(f"{prefix}[{','.join(fmt)}]")
    return ",".join(parts)
