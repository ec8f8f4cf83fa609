"""The cluster spec: instance groups, custom instance types, cluster policy and teams.

``load_spec`` / ``parse_spec`` turn YAML or a dict into a ``ClusterSpec`` and report every problem at once,
each naming its field, as a ``SpecError``: pydantic's errors in the spec's words, and the checks across fields
that pydantic cannot express field by field (``check_spec``). The types are defined by part, in
fairpod.model.fields (the shared words), fairpod.model.policy and fairpod.model.cluster; they are read from here.
"""

from __future__ import annotations

import re
import typing
from collections import Counter
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # types-PyYAML is not a dependency of fairpod
from pydantic import BaseModel, ValidationError

from fairpod.model.catalog import BUILTIN_INSTANCE_TYPES, InstanceType, partitioned
from fairpod.model.cluster import (
    Budget,
    ClusterInfo,
    ClusterSpec,
    Connectivity,
    ExecutorInfo,
    Group,
    InstanceGroup,
    LimitEntry,
    MountsInfo,
    QuotaEntry,
    Sharing,
    Team,
    UserLimits,
)
from fairpod.model.fields import (
    NAME_PATTERN,
    TOPOLOGY_VALUE,
    USER_PATTERN,
    IdleComputeAllocation,
    NodeRecovery,
    PreemptTeamTasks,
    SharingStrategy,
    TaskPrioritization,
    Toggle,
    did_you_mean,
    no_bool_numbers,
)
from fairpod.model.policy import Policy, PriorityClass
from fairpod.model.resources import ZERO, Res

__all__ = [
    "Budget", "ClusterInfo", "ClusterSpec", "Connectivity", "ExecutorInfo", "Group", "IdleComputeAllocation",
    "InstanceGroup", "LimitEntry", "MountsInfo", "NAME_PATTERN", "NodeRecovery", "Policy", "PreemptTeamTasks",
    "PriorityClass", "QuotaEntry", "Sharing", "SharingStrategy", "SpecError", "TOPOLOGY_VALUE",
    "TaskPrioritization", "Team", "Toggle", "USER_PATTERN", "UserLimits", "check_spec", "did_you_mean",
    "load_spec", "no_bool_numbers", "parse_spec", "seed_spec",
]


class SpecError(ValueError):
    """A spec with one or more problems; ``problems`` holds one message per problem, naming its field."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _fields_at(loc: tuple[Any, ...], model: Any = None) -> list[str]:
    """The field names of the spec's model at ``loc`` (a pydantic error's location), for a did-you-mean; [] when
    the location is no model."""

    model = model or ClusterSpec
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        todo, model = [field.annotation], None
        while todo and model is None:  # list[Team], Policy | None, ...: the model inside
            t = todo.pop()
            if isinstance(t, type) and issubclass(t, BaseModel):
                model = t
            else:
                todo += list(typing.get_args(t))
        if model is None:
            return []
    return list(getattr(model, "model_fields", {}))


def _pydantic_problems(e: ValidationError) -> list[str]:
    probs = []
    for err in e.errors():
        msg = err["msg"]
        if err["type"] == "string_pattern_mismatch":
            msg = "must be lower-case letters, digits and '-', starting and ending with a letter or digit"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field" + did_you_mean(str(err["loc"][-1]), _fields_at(err["loc"][:-1]))
        where = _loc(err["loc"])
        if err["type"] == "value_error":  # our validators' own words: "Value error, FIELD: why" -> "LOC.FIELD: why"
            msg = msg.removeprefix("Value error, ")
            field, sep, why = msg.partition(": ")
            if sep and field.isidentifier():
                at_field = bool(err["loc"]) and err["loc"][-1] == field
                where, msg = (where if at_field else f"{where}.{field}" if err["loc"] else field), why
        probs.append(f"{where}: {msg}")
    return probs


def check_spec(spec: ClusterSpec) -> list[str]:
    """Cross-field checks that pydantic cannot express field by field."""
    probs: list[str] = []
    builtin_clash = [t.name for t in spec.instance_types if t.name in BUILTIN_INSTANCE_TYPES]
    for i, t in enumerate(spec.instance_types):
        if t.name in builtin_clash:
            probs.append(f"instance_types[{i}].name: {t.name!r} is a built-in instance type; pick another name")
    cat = spec.catalog()
    known = ", ".join(sorted(cat)[:6]) + ", …"
    for name, n in Counter(t.name for t in spec.instance_types).items():
        if n > 1:
            probs.append(f"instance_types: {name!r} is defined {n} times")
    for name, n in Counter(g.name for g in spec.cluster.instance_groups).items():
        if n > 1:
            probs.append(f"cluster.instance_groups: group name {name!r} is used {n} times")
    for i, g in enumerate(spec.cluster.instance_groups):
        if g.instance_type not in cat:
            probs.append(
                f"cluster.instance_groups[{i}].instance_type: unknown instance type {g.instance_type!r}{did_you_mean(g.instance_type, cat)} "
                f"(built-in: {known}; or define it under instance_types)"
            )
        probs.extend(_topology_problems(spec, i, g))
        if g.accelerator_partition_type and g.instance_type in cat:
            try:
                partitioned(cat[g.instance_type], g.accelerator_partition_type)
            except ValueError as e:
                probs.append(f"cluster.instance_groups[{i}].accelerator_partition_type: {e}")
            if g.accelerators_are == "gpus" and not _executor(spec).real_mig:
                probs.append(f"cluster.instance_groups[{i}].accelerator_partition_type: MIG partitions of real GPUs "
                             f"are not supported on {_executor(spec).name.capitalize()} yet")
        for j, check in enumerate(g.deep_health_checks):
            if check not in ("InstanceStress", "InstanceConnectivity"):
                probs.append(
                    f"cluster.instance_groups[{i}].deep_health_checks[{j}]: unknown check {check!r} "
                    "(InstanceStress, InstanceConnectivity)"
                )
    for name, n in Counter(spec.cluster.topology_levels).items():
        if n > 1:
            probs.append(f"cluster.topology_levels: {name!r} is listed {n} times")
    for j, name in enumerate(spec.cluster.topology_levels):
        if not re.fullmatch(NAME_PATTERN, name) or len(name) > 40:
            probs.append(f"cluster.topology_levels[{j}]: {name!r} must be lower-case letters, digits and '-'")
    for name, n in Counter(p.name for p in spec.policy.priority_classes).items():
        if n > 1:
            probs.append(f"policy.priority_classes: {name!r} is defined {n} times")
    for name, n in Counter(t.name for t in spec.teams).items():
        if n > 1:
            probs.append(f"teams: duplicate team {name!r}")
    for what in ("namespaces", "local_queues"):
        owner: dict[str, str] = {}
        for tm in spec.teams:
            for n in getattr(tm, what):
                if owner.setdefault(n, tm.name) != tm.name:
                    probs.append(f"teams: {what} {n!r} is listed by both {owner[n]} and {tm.name}")
    probs += _group_problems(spec, cat, known)
    quota_sum: dict[str, Res] = {}
    for i, grp in enumerate(spec.groups):
        probs += _quota_problems(f"groups[{i}]", f"group {grp.name!r}", grp.quota, cat, known, quota_sum)
    for i, team in enumerate(spec.teams):
        probs += _quota_problems(f"teams[{i}]", f"team {team.name!r}", team.quota, cat, known, quota_sum)
        probs += _limit_problems(i, team, cat, known)
        seen_b: set[str] = set()
        for j, b in enumerate(team.budgets):
            where = f"teams[{i}].budgets[{j}]"
            if b.instance_type not in cat:
                probs.append(f"{where}.instance_type: unknown instance type {b.instance_type!r}{did_you_mean(b.instance_type, cat)} "
                             f"(built-in: {known})")
            elif cat[b.instance_type].accelerators == 0:
                probs.append(f"{where}.instance_type: {b.instance_type} has no accelerators to count hours of")
            if b.instance_type in seen_b:
                probs.append(f"{where}.instance_type: team {team.name!r} has a budget for {b.instance_type} "
                             "already (one per instance type)")
            seen_b.add(b.instance_type)
    if not probs:
        cap = spec.capacity()
        for it, total in sorted(quota_sum.items()):
            if it in cap and not total.fits_in(cap[it]):
                c = cap[it]
                probs.append(
                    f"teams[*].quota: the quotas for {it} add up to {total.acc} accelerators / {total.vcpu:g} vCPU / "
                    f"{total.memory_gib:g} GiB, more than the cluster's {c.acc} / {c.vcpu:g} / {c.memory_gib:g}"
                )
    return probs


def _topology_problems(spec: ClusterSpec, i: int, g: InstanceGroup) -> list[str]:
    """An instance group's topology names known levels and valid domains, for its own nodes, and leaves no
    level open when the cluster has levels (every node is in one domain of each level)."""
    levels = spec.cluster.topology_levels
    where = f"cluster.instance_groups[{i}]"
    probs = []
    names = {f"{g.name}-{k}" for k in range(g.count)}
    for node in g.node_topology:
        if node not in names:
            probs.append(f"{where}.node_topology: {node!r} is not a node of group {g.name!r} "
                         f"({g.name}-0 … {g.name}-{max(0, g.count - 1)})")
    for field_name, labels in [("topology", g.topology)] + [(f"node_topology.{n}", t) for n, t in
                                                            g.node_topology.items()]:
        for level, value in labels.items():
            if level not in levels:
                probs.append(f"{where}.{field_name}.{level}: unknown topology level (cluster.topology_levels: "
                             f"{', '.join(levels) or 'none'})")
            elif not re.fullmatch(TOPOLOGY_VALUE, str(value)):
                probs.append(f"{where}.{field_name}.{level}: {value!r} must be letters, digits, '-', '_' or '.' "
                             "(at most 63)")
    if levels and not probs and not _executor(spec).nodes_from_executor:
        open_nodes = [n for n in sorted(names) if not all(
            (g.node_topology.get(n, {}) | g.topology).get(lv) for lv in levels)]
        if open_nodes:
            probs.append(f"{where}: node {open_nodes[0]} has no domain for every topology level ({', '.join(levels)});"
                         " give the group's topology or node_topology")
    return probs


def _group_problems(spec: ClusterSpec, cat: dict[str, InstanceType], known: str) -> list[str]:
    """The tree of groups: unique names apart from the teams', known parents, no cycle, known groups of teams."""
    probs: list[str] = []
    names = {g.name for g in spec.groups}
    teams = {t.name for t in spec.teams}
    for name, n in Counter(g.name for g in spec.groups).items():
        if n > 1:
            probs.append(f"groups: duplicate group {name!r}")
    for i, g in enumerate(spec.groups):
        if g.name in teams:
            probs.append(f"groups[{i}].name: {g.name!r} is a team's name too; give the group another name")
        if g.parent is not None and g.parent not in names:
            probs.append(f"groups[{i}].parent: unknown group {g.parent!r}")
        probs += _limit_problems(i, g, cat, known, "groups", "group")
    placed = {g.name for g in spec.groups_top_down()}
    cycle = sorted(g.name for g in spec.groups if g.name not in placed and (g.parent is None or g.parent in names))
    if cycle:
        probs.append(f"groups: {', '.join(cycle)} are their own ancestors (a parent cycle)")
    for i, t in enumerate(spec.teams):
        if t.group is not None and t.group not in names:
            probs.append(f"teams[{i}].group: unknown group {t.group!r}"
                         + (f" (groups: {', '.join(sorted(names))})" if names else " (the spec has no groups)"))
    return probs


def _quota_problems(prefix: str, owner: str, entries: list[QuotaEntry], cat: dict[str, InstanceType], known: str,
                    quota_sum: dict[str, Res]) -> list[str]:
    """A team's or a group's quota entries: known instance types, once each, one unit; their sum per type is added
    to ``quota_sum``."""
    probs: list[str] = []
    seen: set[str] = set()
    for j, q in enumerate(entries):
        where = f"{prefix}.quota[{j}]"
        if q.instance_type not in cat:
            probs.append(f"{where}.instance_type: unknown instance type {q.instance_type!r}"
                         f"{did_you_mean(q.instance_type, cat)} (built-in: {known})")
            continue
        if q.instance_type in seen:
            probs.append(f"{where}.instance_type: {q.instance_type!r} appears twice in {owner}")
        seen.add(q.instance_type)
        given = [k for k in ("accelerators", "vcpu", "memory_gib") if getattr(q, k) is not None]
        if q.count is not None and given:
            probs.append(f"{where}: give either count or {'/'.join(given)}, not both")
            continue
        if q.count is None and not given:
            probs.append(f"{where}: give count, accelerators, vcpu or memory_gib")
            continue
        try:
            r = q.resolve(cat[q.instance_type])
        except ValueError as e:
            probs.append(f"{where}: {e}")
            continue
        quota_sum[q.instance_type] = quota_sum.get(q.instance_type, ZERO) + r
    return probs


def _limit_problems(i: int, team: Team | Group, cat: dict[str, InstanceType], known: str, kind: str = "teams",
                    what: str = "team") -> list[str]:
    """Lending and absolute borrow limits: known instance types, once each, one unit, a strategy that uses them."""
    probs: list[str] = []
    strat = team.sharing.strategy
    for field, entries, needs in (("lending_limits", team.sharing.lending_limits, strat != SharingStrategy.DONT_LEND),
                                  ("absolute_borrow_limits", team.sharing.absolute_borrow_limits,
                                   strat == SharingStrategy.LEND_AND_BORROW)):
        if entries and not needs:
            probs.append(f"{kind}[{i}].sharing.{field}: {what} {team.name!r} has strategy {strat.value}, which "
                         f"{'does not lend' if field == 'lending_limits' else 'does not borrow'}")
            continue
        seen: set[str] = set()
        for j, e in enumerate(entries):
            where = f"{kind}[{i}].sharing.{field}[{j}]"
            if e.instance_type not in cat:
                probs.append(f"{where}.instance_type: unknown instance type {e.instance_type!r}{did_you_mean(e.instance_type, cat)} "
                             f"(built-in: {known})")
                continue
            if e.instance_type in seen:
                probs.append(f"{where}.instance_type: {e.instance_type!r} appears twice")
            seen.add(e.instance_type)
            given = [k for k in ("accelerators", "vcpu", "memory_gib") if getattr(e, k) is not None]
            if (e.count is not None) == bool(given) or len(given) > 1:
                probs.append(f"{where}: give exactly one of count, accelerators, vcpu or memory_gib")
                continue
            try:
                e.resolve(cat[e.instance_type])
            except ValueError as err:
                probs.append(f"{where}: {err}")
    return probs


def parse_spec(data: Any) -> ClusterSpec:
    """Validate a spec given as a dict; raise SpecError listing every problem."""
    if not isinstance(data, dict):
        raise SpecError(["(top level): the spec must be a mapping with cluster, policy, teams …"])
    try:
        spec = ClusterSpec.model_validate(data)
    except ValidationError as e:
        raise SpecError(_pydantic_problems(e)) from None
    probs = check_spec(spec)
    if probs:
        raise SpecError(probs)
    return spec


def load_spec(path: str | Path) -> ClusterSpec:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise SpecError([f"{p}: cannot read: {e.strerror}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError([f"{p}: not valid YAML: {e}"]) from None
    return parse_spec(data)


def seed_spec() -> ClusterSpec:
    """The demo cluster of the seed post: 4 x ml.g5.12xlarge, teams john and smith."""
    return parse_spec(
        {
            "cluster": {"name": "demo", "instance_groups": [
                {"name": "workers", "instance_type": "ml.g5.12xlarge", "count": 4}]},
            "policy": {
                "task_prioritization": "TaskRanking",
                "priority_classes": [{"name": "inference", "weight": 100}, {"name": "training", "weight": 50}],
                "idle_compute_allocation": "FairShare",
            },
            "teams": [
                {"name": "john", "fair_share_weight": 0,
                 "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 50},
                 "quota": [{"instance_type": "ml.g5.12xlarge", "count": 3}]},
                {"name": "smith", "fair_share_weight": 100,
                 "sharing": {"strategy": "LendAndBorrow", "borrow_limit": 100},
                 "quota": [{"instance_type": "ml.g5.12xlarge", "count": 1}]},
            ],
        }
    )


def _executor(spec: ClusterSpec) -> Any:
    """The spec's executor (``fairpod.executors.registry.ExecutorKind``)."""
    from fairpod.executors import registry  # a leaf module: the names only

    return registry.get(spec.cluster.executor.kind)
