"""The executors fairpod knows, by name: the one list that ``fairpod up --executor``, the spec's
``cluster.executor.kind`` and the composition root (``fairpod.server.runtime.wiring``) read.

Each :class:`ExecutorKind` says how to build the executor (``make``, imported only when called, so that reading
this list costs nothing: the spec model and ``fairpod up`` import it) and what the rest of fairpod needs to know of
it, its own options included (:class:`ExecutorOption`: the flag of ``fairpod up``, the field of the spec's
``cluster.executor``, the default; ``fairpod up``, the daemon and the composition root pass them through as they
are). Adding an executor is one :func:`register` call here, and a field of ``cluster.executor``
(``fairpod.model.cluster.ExecutorInfo``) for each option (docs/extending.md walks through it). This module imports
nothing of fairpod at load time.
"""

from __future__ import annotations

from dataclasses import dataclass

TYPE_CHECKING = False  # the CLI reads this list: typing is not worth its import here
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any


@dataclass(frozen=True)
class ExecutorOption:
    """An option of one executor: ``fairpod up``'s flag ``--<name with ->``, the spec's ``cluster.executor.<name>``
    (``fairpod.model.cluster.ExecutorInfo`` has the field), passed to ``make``, ``check`` and ``reach`` by name."""

    name: str  # e.g. ray_address
    default: str
    metavar: str
    help: str  # what ``fairpod up --help`` says of it

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class ExecutorKind:
    name: str
    help: str  # what ``fairpod up --help`` says of it
    make: Callable[..., Any]  # (runs root, **options) -> fairpod.executors.base.Executor
    in_spec: bool = True  # may be named by the spec's cluster.executor.kind (else: the command line only)
    nodes_from_executor: bool = False  # its nodes come from its own node table (NodeTable), not instance_groups
    real_mig: bool = True  # MIG partitions of real GPUs can be given to its replicas
    node_label: str | None = None  # with nodes_from_executor: the label its stored nodes carry (NodeTable)
    check: Callable[..., None] | None = None  # (**options): ValueError (one line) for options it cannot take
    reach: Callable[..., dict[str, str]] | None = None  # (**options) -> options resolved; ExecutorError if unreachable
    options: tuple[ExecutorOption, ...] = ()  # its own options (fairpod up's flags, the spec's cluster.executor)
    on_this_host: bool = False  # its replicas run on this host, in this host's sandbox (what the host enforces holds)
    where: Callable[..., str] | None = None  # (**options) -> where its nodes come from, as fairpod up says it


KINDS: dict[str, ExecutorKind] = {}


def register(kind: ExecutorKind) -> ExecutorKind:
    KINDS[kind.name] = kind
    return kind


def get(name: str) -> ExecutorKind:
    """The executor called ``name``; ValueError with one line (the known names) if there is none."""
    kind = KINDS.get(name)
    if kind is None:
        raise ValueError(f"unknown executor {name!r} ({', '.join(KINDS)})")
    return kind


def names(*, in_spec: bool = False) -> list[str]:
    """Every executor's name (``in_spec``: only those a cluster spec may name)."""
    return [k.name for k in KINDS.values() if k.in_spec or not in_spec]


def nodes_from_executor(name: str) -> bool:
    """Whether the nodes of executor ``name`` come from the executor (unknown names: no)."""
    kind = KINDS.get(name)
    return kind is not None and kind.nodes_from_executor


def options() -> list[tuple[ExecutorKind, ExecutorOption]]:
    """Every executor's own options, with the executor each belongs to."""
    return [(k, o) for k in KINDS.values() for o in k.options]


def on_this_host(name: str | None) -> bool:
    """Whether the replicas of executor ``name`` run on this host (what this host's sandbox enforces holds)."""
    kind = KINDS.get(name or "")
    return kind is not None and kind.on_this_host


def elsewhere(name: str) -> str | None:
    """None where the executor's nodes are this host; else whose nodes they are, for a message."""
    return None if on_this_host(name) else f"the {name} executor's nodes"


def node_labels() -> list[str]:
    """The labels that mark a stored node as one of an executor's own node table."""
    return [k.node_label for k in KINDS.values() if k.node_label]


def _local(root: Path, **options: Any) -> Any:
    from fairpod.executors.local import LocalExecutor

    return LocalExecutor(root, exclusive=bool(options.get("exclusive", True)))


def _ray(root: Path, *, ray_address: str = "auto", ray_namespace: str = "fairpod", **options: Any) -> Any:
    import logging

    from fairpod.executors.ray import RayExecutor

    ex = RayExecutor(root, address=ray_address, namespace=ray_namespace, exclusive=bool(options.get("exclusive", True)))
    logging.getLogger("fairpod").info("executor ray: cluster %s, namespace %s", ex.address, ray_namespace)
    return ex


def _ray_check(*, ray_address: str = "auto", ray_namespace: str = "fairpod", **options: Any) -> None:
    from fairpod.executors.ray import NAMESPACE_RE, parse_address

    if not NAMESPACE_RE.fullmatch(ray_namespace) or len(ray_namespace) > 60:
        raise ValueError(f"invalid Ray namespace {ray_namespace!r}: lower-case letters, digits and '-'")
    if ray_address != "auto":
        parse_address(ray_address)


def _ray_reach(*, ray_address: str = "auto", ray_namespace: str = "fairpod", **options: Any) -> dict[str, str]:
    from fairpod.executors.ray import check_reachable

    return {"ray_address": check_reachable(ray_address), "ray_namespace": ray_namespace}


def _ray_where(*, ray_address: str, ray_namespace: str, **options: Any) -> str:
    return f"nodes from the Ray cluster at {ray_address} (namespace {ray_namespace})"


def _timed(root: Path, **options: Any) -> Any:
    import logging

    from fairpod.executors.timed import TimedExecutor

    logging.getLogger("fairpod").warning("executor 'timed' (benchmarks/tests only): jobs run NO processes; "
                                         "each only waits out its FAIRPOD_BENCH_DURATION or 'sleep N'")
    return TimedExecutor(root)


register(ExecutorKind("local", "this machine; the default", _local, on_this_host=True))
register(ExecutorKind(
    "ray", "the nodes of a Ray cluster: each Ray node with the resource fairpod/instance-type:<type> is a node of "
    "that type; see docs/ray.md", _ray, nodes_from_executor=True, real_mig=False,
    node_label="ray_node_id",  # fairpod.executors.ray.nodes.NODE_ID (tests/executors/test_registry.py)
    check=_ray_check, reach=_ray_reach, where=_ray_where, options=(
        ExecutorOption("ray_address", "auto", "auto|HOST:PORT",
                       "the Ray head's GCS address (implies --executor ray); 'auto': $RAY_ADDRESS or the cluster "
                       "'ray start' started on this machine (default: the spec's cluster.executor.ray_address, else "
                       "auto)"),
        ExecutorOption("ray_namespace", "fairpod", "NAME",
                       "Ray namespace of fairpod's actors and placement groups; one fairpod per namespace (default: "
                       "the spec's cluster.executor.ray_namespace, else fairpod)"))))
register(ExecutorKind(
    "timed", "for benchmarks and tests only: runs no processes, each job just lasts its FAIRPOD_BENCH_DURATION "
    "or 'sleep N' seconds", _timed, in_spec=False))
