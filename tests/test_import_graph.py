"""No import circles among the modules of src/fairpod: the import graph, read with ``ast`` from the sources
(every import statement, also those inside functions and under ``TYPE_CHECKING``), has no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "fairpod").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The fairpod modules ``name`` imports (a package's ``__init__`` is its own node; ``from pkg import mod``
    names the module ``pkg.mod``)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join([*pkg, base] if base else pkg)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    color: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        color[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if color.get(m) == 1:
                return [*stack[stack.index(m):], m]
            if m not in color and (c := visit(m)) is not None:
                return c
        stack.pop()
        color[n] = 2
        return None

    for n in sorted(graph):
        if n not in color and (c := visit(n)) is not None:
            return c
    return None


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    g = {name: imports(name, path, known) for name, path in mods.items()}
    # a module imports its package's __init__ first: that edge is implied, not a circle of the code's design
    return {n: {m for m in deps if not n.startswith(m + ".")} for n, deps in g.items()}


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_sees_the_server() -> None:
    g = graph()
    assert "fairpod.server.core.api" in g["fairpod.server.api.app"]
    assert "fairpod.server.core.transitions.membership" in g["fairpod.server.core.loop"]


def test_no_import_circles_in_src_fairpod() -> None:
    assert find_cycle(graph()) is None, " -> ".join(find_cycle(graph()) or [])
