"""Cluster specs to export: every spec in examples/ and the tests, and a hypothesis strategy for the rest.

The corpus is found, not listed: every YAML file under examples/ and tests/ that is a cluster spec, every spec
written as a literal dict in tests/, benchmarks/ and examples/ (found in the source with ``ast``), the seed spec,
the Kueue benchmark's spec and the engine tests' spec builder (its ``parse_spec`` call captured).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from fairpod.model.catalog import BUILTIN_INSTANCE_TYPES
from fairpod.model.spec import ClusterSpec, parse_spec, seed_spec

ROOT = Path(__file__).resolve().parents[3]
SPEC_KEYS = {"cluster", "teams", "policy", "instance_types"}


def _is_spec(d: Any) -> bool:
    return (isinstance(d, dict) and "teams" in d and set(d) <= SPEC_KEYS and isinstance(d["teams"], list)
            and all(isinstance(t, dict) for t in d["teams"]))


def _yaml_specs() -> dict[str, Any]:
    out = {}
    for base in ("examples", "tests"):
        for p in sorted((ROOT / base).rglob("*.y*ml")):
            try:
                docs = list(yaml.safe_load_all(p.read_text()))
            except yaml.YAMLError:
                continue
            for i, d in enumerate(docs):
                if _is_spec(d):
                    out[f"{p.relative_to(ROOT)}#{i}"] = d
    return out


def _literal_specs() -> dict[str, Any]:
    out = {}
    for base in ("tests", "benchmarks", "examples"):
        for p in sorted((ROOT / base).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text())):
                if isinstance(node, ast.Dict):
                    try:
                        d = ast.literal_eval(node)
                    except ValueError:
                        continue
                    if _is_spec(d):
                        out[f"{p.relative_to(ROOT)}:{node.lineno}"] = d
    return out


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _engine_helper_spec() -> Any:
    from tests.governance import helpers

    seen: list[Any] = []
    real = helpers.parse_spec
    helpers.parse_spec = lambda d: seen.append(d) or real(d)  # type: ignore[assignment]
    try:
        helpers.make(4, [{"name": "a", "quota": 8, "weight": 10}, {"name": "b", "quota": 4, "strategy": "Lend"},
                         {"name": "c", "strategy": "DontLend", "preempt": "Never"}], task_prioritization="TaskRanking")
    finally:
        helpers.parse_spec = real  # type: ignore[assignment]
    return seen[0]


def corpus() -> dict[str, ClusterSpec]:
    specs: dict[str, Any] = {**_yaml_specs(), **_literal_specs()}
    specs["fairpod.model.spec.seed_spec"] = seed_spec().model_dump(mode="json")
    specs["benchmarks/kueue_baseline.py:spec"] = _load(ROOT / "benchmarks" / "kueue_baseline.py").spec()
    specs["tests/governance/helpers.py:make"] = _engine_helper_spec()
    out = {k: parse_spec(v) for k, v in specs.items()}
    # MIG partitions are not exported to Kueue (refused in one line: tests/governance/test_partitions.py)
    return {k: s for k, s in out.items() if not any(g.accelerator_partition_type for g in s.cluster.instance_groups)}


# -- generated specs -------------------------------------------------------------------------------------------

NAMES = st.from_regex(r"[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,5})?", fullmatch=True)
BUILTIN = sorted(BUILTIN_INSTANCE_TYPES)


@st.composite
def cluster_specs(draw: st.DrawFn) -> ClusterSpec:
    """A valid spec: built-in and custom instance types, node groups, priority classes, every policy setting,
    teams with whole-node or partial quotas (at fairpod's precision: millicores, MiB) and every sharing
    strategy; the quotas never exceed the capacity."""
    custom = []
    for i in range(draw(st.integers(0, 2))):
        prefix = draw(st.sampled_from(["custom", "Custom_", "gpu-box"]))  # flavor names are lower-case DNS names
        custom.append({"name": f"{prefix}{i}.x{draw(st.integers(1, 99))}large",
                       "accelerators": draw(st.integers(0, 16)), "vcpu": draw(st.integers(1, 256)),
                       "memory_gib": draw(st.integers(1, 2048)),
                       "accelerator_kind": draw(st.sampled_from([None, "NVIDIA H100", "AWS Trainium"]))})
    types = {t["name"]: (t["accelerators"], t["vcpu"], t["memory_gib"]) for t in custom}
    for name in draw(st.lists(st.sampled_from(BUILTIN), max_size=3, unique=True)):
        b = BUILTIN_INSTANCE_TYPES[name]
        types[name] = (b.accelerators, b.vcpu, b.memory_gib)
    if not types:
        b = BUILTIN_INSTANCE_TYPES["ml.g5.12xlarge"]
        types[b.name] = (b.accelerators, b.vcpu, b.memory_gib)
    groups, cap = [], {}
    for i, it in enumerate(types):
        if draw(st.booleans()) or not groups:
            n = draw(st.integers(0, 40))
            groups.append({"name": f"g{i}", "instance_type": it, "count": n,
                           "deep_health_checks": draw(st.sampled_from([[], ["InstanceStress"]]))})
            cap[it] = cap.get(it, 0) + n
    classes = [{"name": n, "weight": draw(st.integers(0, 100))}
               for n in draw(st.lists(NAMES, max_size=4, unique=True))]
    teams = []
    left = dict(cap)
    for name in draw(st.lists(NAMES, max_size=5, unique=True)):
        quota = []
        for it in draw(st.lists(st.sampled_from(sorted(left)), max_size=2, unique=True)) if left else []:
            acc, vcpu, mem = types[it]
            nodes = draw(st.integers(0, left[it]))
            if nodes == 0 or draw(st.booleans()):
                quota.append({"instance_type": it, "count": nodes})
            else:  # part of `nodes` nodes, by one or more of the three figures
                frac = draw(st.integers(1, 1000)) / 1000
                entry: dict[str, Any] = {"instance_type": it}
                kinds = draw(st.sets(st.sampled_from(["accelerators", "vcpu", "memory_gib"]), min_size=1))
                if acc == 0:
                    kinds.discard("accelerators")
                    kinds.add("vcpu")
                if "accelerators" in kinds:
                    entry["accelerators"] = int(acc * nodes * frac)
                if "vcpu" in kinds:
                    entry["vcpu"] = round(vcpu * nodes * frac, 3)
                if "memory_gib" in kinds:
                    entry["memory_gib"] = round(mem * nodes * frac * 1024) / 1024
                quota.append(entry)
            left[it] -= nodes
        teams.append({
            "name": name, "fair_share_weight": draw(st.integers(0, 100)),
            "preempt_team_tasks": draw(st.sampled_from(["LowerPriority", "Never"])),
            "sharing": {"strategy": draw(st.sampled_from(["LendAndBorrow", "Lend", "DontLend"])),
                        "borrow_limit": draw(st.integers(1, 500))},
            "quota": quota,
            "run_as": draw(st.sampled_from([None, "trainer"])),
        })
    data = {
        "cluster": {"name": draw(NAMES), "instance_groups": groups,
                    "node_recovery": draw(st.sampled_from(["Automatic", "None"]))},
        "instance_types": custom,
        "policy": {
            "task_prioritization": draw(st.sampled_from(["TaskRanking", "FirstComeFirstServe"])),
            "priority_classes": classes,
            "idle_compute_allocation": draw(st.sampled_from(["FairShare", "FirstComeFirstServe"])),
            "idle_resource_sharing": draw(st.sampled_from(["Enabled", "Disabled"])),
            "starvation_guard_seconds": draw(st.sampled_from([0, 600, 1234.5])),
            "max_min_runtime_seconds": draw(st.sampled_from([0, 3600, 7200])),
        },
        "teams": teams,
    }
    return parse_spec(data)
