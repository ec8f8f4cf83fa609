"""No module of src/ over ~450 lines without the reason written at its top (``Longer than fairpod's usual
module``). ``python -m pytest tests/test_module_sizes.py -q`` lists the offenders."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "fairpod"
LIMIT = 450
REASON = "Longer than fairpod's usual module"


def long_without_reason() -> list[str]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        lines = text.count("\n")
        if lines > LIMIT and REASON not in (ast.get_docstring(ast.parse(text)) or ""):
            out.append(f"{path.relative_to(SRC.parent)}: {lines} lines")
    return out


def test_every_long_module_says_why() -> None:
    assert long_without_reason() == []

