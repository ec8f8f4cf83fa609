"""The layers of src/fairpod, as docs/architecture.md ("Layers") states them: each package imports only the
packages its row allows (every import statement, read with ``ast``: also those inside functions and under
``TYPE_CHECKING``), and no module hands on a name it imported from another package (a name is imported from the
package that defines it)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_import_graph import SRC, graph, imports, modules

DOC = SRC.parent / "docs" / "architecture.md"
ROW = re.compile(r"^\|\s*`fairpod\.(\w+)`\s*\|\s*(.*?)\s*\|\s*$")


def package(module: str) -> str:
    """``fairpod.server.core`` -> ``server``; ``fairpod.native`` -> ``native``; ``fairpod`` -> ``fairpod``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def allowed(doc: str | None = None) -> dict[str, set[str]]:
    """The table under "## Layers" in docs/architecture.md: package -> the packages it may import."""
    text = doc if doc is not None else DOC.read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {}
    for line in section.splitlines():
        m = ROW.match(line)
        if m:
            table[m.group(1)] = set(re.findall(r"`fairpod\.([\w.]+)`", m.group(2)))
    return table


def back_imports(g: dict[str, set[str]], table: dict[str, set[str]]) -> list[str]:
    """Every import of a package its row does not allow, as ``module -> module``."""
    bad = []
    for mod, deps in sorted(g.items()):
        src = package(mod)
        for dep in sorted(deps):
            dst = package(dep)
            rel = dep.partition(".")[2]  # a row may name one module of a package (``fairpod.executors.registry``)
            modules_ok = any(rel == a or rel.startswith(a + ".") for a in table.get(src, set()) if "." in a)
            if dst not in (src, "fairpod") and dst not in table.get(src, set()) and not modules_ok:
                bad.append(f"{mod} -> {dep}")
    return bad


def _imported(path: Path) -> list[tuple[str, str, str]]:
    """(module, name, bound as) of each absolute ``from fairpod... import name`` in a file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("fairpod"):
            out += [(node.module or "", a.name, a.asname or a.name) for a in node.names]
    return out


def foreign_names(mods: dict[str, Path]) -> dict[str, dict[str, str]]:
    """Per module, the names it binds by importing them from another package, directly or through a module of
    its own package that did: name -> where it is defined."""
    known = set(mods)
    imported = {m: _imported(p) for m, p in mods.items()}
    foreign: dict[str, dict[str, str]] = {m: {} for m in mods}
    changed = True
    while changed:
        changed = False
        for m, names in imported.items():
            for src, name, bound in names:
                if f"{src}.{name}" in known or bound in foreign[m]:
                    continue  # a module, not a name; or known already
                if package(src) != package(m):
                    foreign[m][bound] = foreign.get(src, {}).get(name, f"{src}.{name}")
                    changed = True
                elif name in foreign.get(src, {}):
                    foreign[m][bound] = foreign[src][name]
                    changed = True
    return foreign


def reexports() -> list[str]:
    """Each ``from M import N`` (in src, tests, benchmarks, examples) where M only imported N from another
    package, and each ``__all__`` that lists such a name."""
    mods = modules()
    foreign = foreign_names(mods)
    bad = []
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                for elt in getattr(node.value, "elts", []):
                    if isinstance(elt, ast.Constant) and elt.value in foreign[m]:
                        bad.append(f"{m}.__all__ lists {elt.value} (from {foreign[m][elt.value]})")
    root = SRC.parent
    for folder in ("src", "tests", "benchmarks", "examples"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and not node.level and node.module in foreign:
                    for a in node.names:
                        if a.name in foreign[node.module]:
                            bad.append(f"{path.relative_to(root)}: from {node.module} import {a.name} "
                                       f"(defined in {foreign[node.module][a.name].rpartition('.')[0]})")
    return bad


def test_the_table_is_read_from_the_docs() -> None:
    table = allowed()
    assert table["governance"] == {"model", "native"}
    assert "server" not in table["health"] and "cli" not in table["formats"]


def test_every_package_has_its_row() -> None:
    table = allowed()
    missing = sorted({package(m) for m in modules()} - set(table) - {"fairpod"})
    assert not missing, f"packages without a row in docs/architecture.md \"Layers\": {missing}"
    unknown = sorted({p.split(".")[0] for row in table.values() for p in row} - set(table))
    assert not unknown, f"rows of docs/architecture.md \"Layers\" name packages that do not exist: {unknown}"


def test_the_checker_finds_a_back_import() -> None:
    g = {"fairpod.health.manager": {"fairpod.server.core"}, "fairpod.server.core": {"fairpod.health.probe"}}
    table = {"health": set(), "server": {"health"}}
    assert back_imports(g, table) == ["fairpod.health.manager -> fairpod.server.core"]
    # a row that names one module of a package allows that module, not its package's others
    g = {"fairpod.model.spec": {"fairpod.executors.registry", "fairpod.executors.local"}}
    assert back_imports(g, {"model": {"executors.registry"}}) == ["fairpod.model.spec -> fairpod.executors.local"]


def test_no_package_imports_one_its_row_does_not_allow() -> None:
    bad = back_imports(graph(), allowed())
    assert not bad, "imports that docs/architecture.md \"Layers\" does not allow:\n" + "\n".join(bad)


def test_no_module_hands_on_another_packages_names() -> None:
    bad = reexports()
    assert not bad, "names imported through a package that does not define them:\n" + "\n".join(bad)


# -- the control plane's core behind its door (docs/architecture.md, "The core and its door") ----------------
CORE = "fairpod.server.core"
DOOR = {"fairpod.server.core.api", "fairpod.server.core.queries"}  # what any module outside the core may import
ROOT = {"fairpod.server.runtime.wiring": {CORE}}  # the composition root builds the ControlPlane (the package's __init__)
PRIVATE = ("store", "snap", "lock", "runs")  # the core's state: never reached through the control plane


def _in_core(module: str) -> bool:
    return module == CORE or module.startswith(CORE + ".")


def core_door_violations(mods: dict[str, Path]) -> list[str]:
    """Each import of the core's state, transitions or plane by a module outside ``fairpod.server.core`` (it
    may import ``core.api`` and ``core.queries`` only), each route that imports the store itself (routes read
    through ``core.queries``), and each ``cp.store``, ``cp.snap``, ``cp.lock``, ``cp.runs`` (also ``self.cp.``...,
    ``app.state.cp.``...) outside the core."""
    known = set(mods)
    bad = []
    for mod, path in sorted(mods.items()):
        if _in_core(mod):
            continue
        door = DOOR | ROOT.get(mod, set())
        bad += [f"{mod} -> {dep}" for dep in sorted(imports(mod, path, known)) if _in_core(dep) and dep not in door]
        tree = ast.parse(path.read_text(), str(path))
        if mod.rpartition(".")[2].startswith("routes_"):
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fairpod.store"):
                    bad += [f"{mod} imports {node.module}.Store (a route reads through core.queries)"
                            for a in node.names if a.name == "Store"]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE and (
                    (isinstance(node.value, ast.Name) and node.value.id == "cp")
                    or (isinstance(node.value, ast.Attribute) and node.value.attr == "cp")):
                bad.append(f"{mod}:{node.lineno} reads cp.{node.attr}")
    return bad


def test_nothing_outside_the_core_reaches_past_its_door() -> None:
    bad = core_door_violations(modules())
    assert not bad, "modules outside fairpod.server.core that reach past core.api and core.queries:\n" + "\n".join(bad)


def test_the_door_check_finds_a_planted_violation(tmp_path: Path) -> None:
    """A route planted beside the real modules that imports a transition and the core's state, reads the store
    and the snapshot through the control plane and imports the store: each is found; the same imports inside the
    core are its own business."""
    route = tmp_path / "routes_planted.py"
    route.write_text("from fairpod.server.core.transitions import backoff\n"
                     "from fairpod.server.core.state import CoreState\n"
                     "from fairpod.store import Store\n\n\n"
                     "def get(cp: CoreState, store: Store) -> object:\n"
                     "    with cp.lock:\n"
                     "        return cp.store.get_job(1), cp.snap, backoff\n")
    inside = tmp_path / "planted.py"
    inside.write_text(route.read_text())
    mods = {**modules(), "fairpod.server.routes_planted": route, "fairpod.server.core.planted": inside}
    assert sorted(core_door_violations(mods)) == sorted([
        "fairpod.server.routes_planted -> fairpod.server.core.state",
        "fairpod.server.routes_planted -> fairpod.server.core.transitions.backoff",
        "fairpod.server.routes_planted imports fairpod.store.Store (a route reads through core.queries)",
        "fairpod.server.routes_planted:7 reads cp.lock",
        "fairpod.server.routes_planted:8 reads cp.store",
        "fairpod.server.routes_planted:8 reads cp.snap",
    ])


# -- the routes (docs/architecture.md, "The server's rooms") ----------------------------------------------------
# What a route module (server/api/routes_*.py) may import of fairpod.server: the core's door, the domain errors, the
# HTTP layer's own modules (api/: views, rules, limits, job references; access/: who is calling) and the reports
# that read through the door themselves (accounting/). Never the core's words it keeps in memory (runs, nodes,
# arrays), its plumbing, the keepers, the services, HA or the runtime: what a route shows of those, a view builds.
ROUTE_MAY = ("fairpod.server.core.api", "fairpod.server.core.queries", "fairpod.server.errors",
             "fairpod.server.api", "fairpod.server.access", "fairpod.server.accounting")


def is_route(module: str) -> bool:
    return module.startswith("fairpod.server.") and module.rpartition(".")[2].startswith("routes_")


def route_violations(mods: dict[str, Path]) -> list[str]:
    """Each import, by a route module, of a module of ``fairpod.server`` that ``ROUTE_MAY`` does not name (top-level
    or inside a function)."""
    known = set(mods)
    return [f"{mod} -> {dep}" for mod, path in sorted(mods.items()) if is_route(mod)
            for dep in sorted(imports(mod, path, known))
            if dep.startswith("fairpod.server") and not any(dep == a or dep.startswith(a + ".") for a in ROUTE_MAY)]


def test_routes_see_the_core_only_through_its_door() -> None:
    bad = route_violations(modules())
    assert not bad, "routes that import more of fairpod.server than the core's door and the API's own modules:\n" + \
        "\n".join(bad)


def test_the_route_check_finds_a_planted_violation(tmp_path: Path) -> None:
    """A route planted beside the real ones that imports the core's memory (``runs``), a keeper, the runtime (in a
    function) and the core's state: each is found; the door, the errors and the API's own modules are not; a module
    of api/ that is no route may import them."""
    route = tmp_path / "routes_planted.py"
    route.write_text("from fairpod.server.api.views import job_view\n"
                     "from fairpod.server.core.api import Core\n"
                     "from fairpod.server.core.state import CoreState\n"
                     "from fairpod.server.errors import Problem\n"
                     "from fairpod.server.keepers import outage\n"
                     "from fairpod.server.runs import job_key\n\n\n"
                     "def get(cp: Core) -> object:\n"
                     "    from fairpod.server.runtime.wiring import build\n\n"
                     "    return job_view, CoreState, Problem, outage, job_key, build\n")
    helper = tmp_path / "planted.py"
    helper.write_text(route.read_text())
    mods = {**modules(), "fairpod.server.api.routes_planted": route, "fairpod.server.api.planted": helper}
    assert route_violations(mods) == [
        "fairpod.server.api.routes_planted -> fairpod.server.core.state",
        "fairpod.server.api.routes_planted -> fairpod.server.keepers.outage",
        "fairpod.server.api.routes_planted -> fairpod.server.runs",
        "fairpod.server.api.routes_planted -> fairpod.server.runtime.wiring",
    ]


def core_upward_imports(mods: dict[str, Path]) -> list[str]:
    """Each import (top-level or inside a function) by a module of ``fairpod.server.core`` of a module outside the
    core that itself imports the core, directly or through others: such a module stands on the core's door, so the
    core importing it is an arrow upwards (the composition root hands such parts in, ``runtime.control_plane``)."""
    known = set(mods)
    g = {m: imports(m, p, known) for m, p in mods.items()}
    above: dict[str, bool] = {}

    def stands_on_core(m: str, seen: set[str]) -> bool:
        if m not in above:
            seen.add(m)
            above[m] = any(_in_core(d) or (d not in seen and stands_on_core(d, seen)) for d in g.get(m, ()))
        return above[m]

    return [f"{mod} -> {dep}" for mod in sorted(mods) if _in_core(mod) for dep in sorted(g[mod])
            if not _in_core(dep) and stands_on_core(dep, set())]


def test_the_core_imports_nothing_that_stands_on_it() -> None:
    bad = core_upward_imports(modules())
    assert not bad, "modules of fairpod.server.core that import a module above the core:\n" + "\n".join(bad)


def test_the_upward_check_finds_a_planted_violation(tmp_path: Path) -> None:
    """A core module planted beside the real ones that imports a module on the door at the top and one inside a
    function, and one that reaches the door only through another module: each is found; a module outside the core
    that does not import it (``fairpod.server.runs``) is below it and may be imported."""
    between = tmp_path / "between.py"
    between.write_text("from fairpod.server.accounting import usage\n")
    inside = tmp_path / "planted.py"
    inside.write_text("from fairpod.server.accounting.eta import held_starts\n"
                      "from fairpod.server.planted_between import usage\n"
                      "from fairpod.server.runs import job_key\n\n\n"
                      "def hook() -> object:\n"
                      "    from fairpod.server.services.spaces import stop_idle\n\n"
                      "    return stop_idle, held_starts, usage, job_key\n")
    mods = {**modules(), "fairpod.server.core.planted": inside, "fairpod.server.planted_between": between}
    assert core_upward_imports(mods) == [
        "fairpod.server.core.planted -> fairpod.server.accounting.eta",
        "fairpod.server.core.planted -> fairpod.server.planted_between",
        "fairpod.server.core.planted -> fairpod.server.services.spaces",
    ]
