"""Job traces for the simulator: CSV files checked against a cluster spec.

Two formats, told apart by the header:

- fairpod traces: ``submit_time`` (s), ``team``, ``duration`` (s of work), ``accelerators`` (total), and the
  optional ``nodes``, ``instance_type`` (or several in order of preference, comma-separated: the job starts on
  the first that fits, with the same replica count), ``priority`` (a priority class of the spec), ``name``,
  ``checkpoint_interval`` (s), ``min_runtime`` (s), ``required_topology`` or ``preferred_topology`` (a level
  of the spec's ``topology_levels``), ``user`` (who submitted it, for a team's per-user limits) and ``min_nodes``
  (an elastic job: it runs with min_nodes..nodes replicas; ``duration`` is its run time at ``nodes``), ``kind``
  (``job``, the default; ``service``; ``ray``: see ``fairpod.governance.kinds``), and for a service
  ``min_replicas`` (default 1) and ``max_replicas`` (default ``min_replicas``): a service's ``accelerators`` are
  each replica's (one replica per node) and ``duration`` is how long it is up; a Ray job is ``nodes`` Ray nodes,
  one gang of a fixed size; ``priority_change_at`` (s, at or after ``submit_time``) and ``priority_change_to`` (a
  priority class, or ``none``): the job's priority changed then, as ``fairpod set-priority`` does. An empty cell
  means the column's default.
- ITP traces (``job_id,submission_time,duration,num_gpu``): one team per file, named after the file stem.

A trace path may be one file or a directory of ``*.csv`` files (each in either format). Problems raise
``TraceError`` naming the file, line and column.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from fairpod.governance.kinds import KINDS
from fairpod.model.catalog import PARTITIONED, InstanceType
from fairpod.model.resources import Res, by_ratio, partition_share
from fairpod.model.spec import ClusterSpec

REQUIRED = ("submit_time", "team", "duration", "accelerators")
OPTIONAL = ("nodes", "instance_type", "priority", "name", "checkpoint_interval", "min_runtime", "required_topology",
            "preferred_topology", "user", "min_nodes", "kind", "min_replicas", "max_replicas", "priority_change_at",
            "priority_change_to")
ITP = ("job_id", "submission_time", "duration", "num_gpu")


class TraceError(ValueError):
    """A trace that cannot be simulated; the message names file, line and column."""


@dataclass(slots=True, frozen=True)
class TraceJob:
    """One job of a trace, resolved against the spec: ``nodes`` replicas of ``per_replica`` on ``itype``."""

    name: str
    team: str
    itype: str
    nodes: int
    accelerators: int  # total over all nodes
    per_replica: Res
    priority: int  # weight of the priority class; -1 without one
    submit: float
    duration: float  # seconds of work
    checkpoint_interval: float | None = None
    min_runtime: float = 0.0
    topology: str | None = None  # a topology level of the spec: replicas in one domain of it (or few)
    topology_required: bool = False
    where: str = ""  # "file:line"
    user: str = ""  # who submitted it (a team's per-user limits)
    min_nodes: int | None = None  # elastic: runs with min_nodes..nodes replicas (None: always ``nodes``)
    fallbacks: tuple[tuple[str, Res], ...] = ()  # instance types it may run on instead, in order, with their request
    # job, service or ray (``governance.kinds``); a service's ``nodes`` is its max_replicas, ``min_nodes`` its
    # min_replicas (when below), ``accelerators`` its total at max_replicas and ``duration`` how long it is up
    kind: str = "job"
    priority_change: tuple[float, int] | None = None  # (when, the new weight): ``fairpod set-priority`` then

    @property
    def min_replicas(self) -> int:
        """The gang it starts with: min_nodes of an elastic job, a service's min_replicas, else ``nodes``."""
        return self.min_nodes or self.nodes


def _number(text: str, where: str, col: str, *, integer: bool = False, positive: bool = False) -> float:
    try:
        v = float(text)
    except ValueError:
        raise TraceError(f"{where}: column {col}: {text!r} is not a number") from None
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise TraceError(f"{where}: column {col}: {text!r} must be {'> 0' if positive else '>= 0'}")
    if integer and v != int(v):
        raise TraceError(f"{where}: column {col}: {text!r} must be a whole number")
    return v


def _count(cell: dict[str, str], col: str, where: str) -> int | None:
    """The whole number > 0 in ``cell[col]``, or None when the cell is empty (the column's default)."""
    text = cell.get(col, "")
    return int(_number(text, where, col, integer=True, positive=True)) if text else None


class _Resolver:
    """Checks rows against the spec; caches what depends only on (type, accelerators, nodes)."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.catalog = spec.catalog()
        self.types = sorted({g.node_type for g in spec.cluster.instance_groups})
        self.teams = {t.name for t in spec.teams}
        self.prios = {p.name: p.weight for p in spec.policy.priority_classes}
        self.shapes: dict[tuple[str, int, int | None], tuple[int, Res]] = {}
        self.counts: dict[str, int] = {}  # jobs per team so far, for default names

    def itype(self, name: str, where: str) -> InstanceType:
        if not name:
            if len(self.types) != 1:
                listed = ", ".join(self.types) or "none"
                raise TraceError(f"{where}: column instance_type: the cluster has {len(self.types)} instance "
                                 f"types ({listed}); name one")
            name = self.types[0]
        t = self.catalog.get(name)
        if t is None:
            raise TraceError(f"{where}: column instance_type: unknown instance type {name!r}")
        if t.accelerators == 0:
            raise TraceError(f"{where}: column instance_type: {name} has no accelerators")
        return t

    def shape(self, t: InstanceType, acc: int, nodes: int | None, where: str) -> tuple[int, Res]:
        key = (t.name, acc, nodes)
        got = self.shapes.get(key)
        if got is not None:
            return got
        k = t.accelerators
        if nodes is None:  # as few nodes as hold the accelerators, split evenly
            nodes = next(n for n in range(-(-acc // k), acc + 1) if acc % n == 0)
        elif acc % nodes:
            raise TraceError(f"{where}: column accelerators: {acc} accelerators cannot be split evenly over "
                             f"{nodes} nodes")
        if acc // nodes > k:
            raise TraceError(f"{where}: column accelerators: {acc} accelerators on {nodes} node(s) is "
                             f"{acc // nodes} per node, but a {t.name} node has {k}")
        share = partition_share if PARTITIONED.search(t.name) else by_ratio  # MIG partitions: as resolve_job
        got = self.shapes[key] = (nodes, share(t, acc // nodes))
        return got

    def priority_change(self, cell: dict[str, str], submit: float, where: str) -> tuple[float, int] | None:
        at, to = cell.get("priority_change_at", ""), cell.get("priority_change_to", "")
        if not at and not to:
            return None
        if not at or not to:
            raise TraceError(f"{where}: columns priority_change_at and priority_change_to: give both, or neither")
        when = _number(at, where, "priority_change_at")
        if when < submit:
            raise TraceError(f"{where}: column priority_change_at: {when:g} is before the job's submit_time "
                             f"{submit:g}")
        if to != "none" and to not in self.prios:
            raise TraceError(f"{where}: column priority_change_to: unknown priority class {to!r} "
                             f"(valid: {', '.join(self.prios) or 'none defined'}, or none)")
        return when, (-1 if to == "none" else self.prios[to])

    def job(self, cell: dict[str, str], where: str) -> TraceJob:
        """The job of one row (cells by column name); names default to ``<team>-<n>``, n counting from 1."""
        team = cell["team"]
        if team not in self.teams:
            raise TraceError(f"{where}: column team: unknown team {team!r} "
                             f"(teams: {', '.join(sorted(self.teams)) or 'none defined'})")
        n = self.counts[team] = self.counts.get(team, 0) + 1
        prio_name = cell.get("priority") or None
        if prio_name is not None and prio_name not in self.prios:
            raise TraceError(f"{where}: column priority: unknown priority class {prio_name!r} "
                             f"(valid: {', '.join(self.prios) or 'none defined'})")
        names = [x.strip() for x in cell.get("instance_type", "").split(",")]
        if len(names) > 1 and (not all(names) or len(set(names)) != len(names)):
            raise TraceError(f"{where}: column instance_type: {cell['instance_type']!r}: name each instance type "
                             "once, comma-separated")
        t = self.itype(names[0], where)
        kind = self.kind(cell, where)
        acc = int(_number(cell["accelerators"], where, "accelerators", integer=True, positive=True))
        if kind == "service":  # each replica's accelerators, on min_replicas..max_replicas nodes
            lo, nodes = self.replicas(cell, where)
            if acc > t.accelerators:
                raise TraceError(f"{where}: column accelerators: a service's accelerators are each replica's (one "
                                 f"node): {acc}, but a {t.name} node has {t.accelerators}")
            min_nodes: int | None = lo
            acc *= nodes
        else:
            nodes = _count(cell, "nodes", where)
            min_nodes = _count(cell, "min_nodes", where)
        nodes, per = self.shape(t, acc, nodes, where)
        fallbacks = tuple((ft.name, self.shape(ft, acc, nodes, where)[1])
                          for ft in (self.itype(x, where) for x in names[1:]))
        if min_nodes is not None and min_nodes > nodes:
            raise TraceError(f"{where}: column min_nodes: {min_nodes} is more than the job's {nodes} nodes (an "
                             "elastic job runs with min_nodes..nodes replicas)")
        ck = cell.get("checkpoint_interval", "")
        mr = cell.get("min_runtime", "")
        req, pref = cell.get("required_topology", ""), cell.get("preferred_topology", "")
        if req and pref:
            raise TraceError(f"{where}: columns required_topology and preferred_topology: give one, not both")
        levels = self.spec.cluster.topology_levels
        if (req or pref) and (req or pref) not in levels:
            col = "required_topology" if req else "preferred_topology"
            raise TraceError(f"{where}: column {col}: the cluster has no topology level {req or pref!r} "
                             f"(cluster.topology_levels: {', '.join(levels) or 'none defined'})")
        submit = _number(cell["submit_time"], where, "submit_time")
        return TraceJob(
            priority_change=self.priority_change(cell, submit, where),
            name=cell.get("name") or f"{team}-{n}",
            team=team,
            itype=t.name,
            nodes=nodes,
            accelerators=acc,
            per_replica=per,
            priority=self.prios[prio_name] if prio_name is not None else -1,
            submit=submit,
            duration=_number(cell["duration"], where, "duration"),
            checkpoint_interval=_number(ck, where, "checkpoint_interval", positive=True) if ck else None,
            min_runtime=_number(mr, where, "min_runtime") if mr else 0.0,
            topology=req or pref or None,
            topology_required=bool(req),
            fallbacks=fallbacks,
            where=where,
            user=cell.get("user", ""),
            min_nodes=min_nodes if min_nodes is not None and min_nodes < nodes else None,
            kind=kind,
        )

    @staticmethod
    def kind(cell: dict[str, str], where: str) -> str:
        """The row's kind; the columns that go with another kind are refused."""
        kind = cell.get("kind") or "job"
        if kind not in KINDS:
            raise TraceError(f"{where}: column kind: {kind!r} is not a kind (kinds: {', '.join(KINDS)})")
        if kind == "service":
            for col in ("nodes", "min_nodes"):
                if cell.get(col):
                    raise TraceError(f"{where}: column {col}: a service's size is min_replicas..max_replicas "
                                     f"(its accelerators are each replica's); leave {col} empty")
        else:
            for col in ("min_replicas", "max_replicas"):
                if cell.get(col):
                    raise TraceError(f"{where}: column {col}: only a service has replicas (kind service); a "
                                     f"{kind}'s size is nodes")
        if kind == "ray" and cell.get("min_nodes"):
            raise TraceError(f"{where}: column min_nodes: a Ray job is one gang of a fixed size (nodes); leave "
                             "min_nodes empty")
        return kind

    @staticmethod
    def replicas(cell: dict[str, str], where: str) -> tuple[int, int]:
        """A service's (min_replicas, max_replicas)."""
        lo = _count(cell, "min_replicas", where) or 1
        hi = _count(cell, "max_replicas", where) or lo
        if hi < lo:
            raise TraceError(f"{where}: column max_replicas: {hi} is less than min_replicas {lo}")
        return lo, hi


def _read_file(path: Path, res: _Resolver, out: list[TraceJob]) -> None:
    try:
        f = path.open(newline="", encoding="utf-8-sig")
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror}") from None
    with f:
        rows = csv.reader(f)
        try:
            header = [h.strip() for h in next(rows)]
        except StopIteration:
            raise TraceError(f"{path}: the file is empty (expected a CSV header)") from None
        except (csv.Error, UnicodeDecodeError) as e:
            raise TraceError(f"{path}:1: not a CSV file: {e}") from None
        itp = set(ITP) <= set(header)
        if not itp:
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise TraceError(f"{path}:1: missing column(s) {', '.join(missing)} (a trace needs "
                                 f"{', '.join(REQUIRED)}, or the ITP columns {', '.join(ITP)})")
            unknown = [c for c in header if c not in REQUIRED and c not in OPTIONAL]
            if unknown:
                raise TraceError(f"{path}:1: unknown column(s) {', '.join(unknown)} (optional columns: "
                                 f"{', '.join(OPTIONAL)})")
        dup = next((c for c in header if header.count(c) > 1), None)
        if dup:
            raise TraceError(f"{path}:1: column {dup} appears twice")
        idx = {c: i for i, c in enumerate(header)}
        team = path.stem
        try:
            for row in rows:
                line = rows.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                where = f"{path}:{line}"
                if len(row) != len(header):
                    raise TraceError(f"{where}: {len(row)} cells, but the header has {len(header)} columns")
                if itp:
                    cell = {"name": row[idx["job_id"]].strip(), "team": team,
                            "submit_time": row[idx["submission_time"]].strip(),
                            "duration": row[idx["duration"]].strip(), "accelerators": row[idx["num_gpu"]].strip()}
                else:
                    cell = {c: row[i].strip() for c, i in idx.items()}
                for c in REQUIRED:
                    if not cell[c]:
                        raise TraceError(f"{where}: column {c}: empty, but the column is required")
                out.append(res.job(cell, where))
        except (csv.Error, UnicodeDecodeError) as e:
            raise TraceError(f"{path}:{rows.line_num}: not valid CSV: {e}") from None


def load_trace(path: str | Path, spec: ClusterSpec) -> list[TraceJob]:
    """All jobs of a trace file or directory, in submit order (ties: file order, then line order)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*.csv"))
        if not files:
            raise TraceError(f"{p}: no *.csv files in this directory")
    elif p.exists():
        files = [p]
    else:
        raise TraceError(f"{p}: no such file or directory")
    res = _Resolver(spec)
    jobs: list[TraceJob] = []
    for f in files:
        _read_file(f, res, jobs)
    seen: dict[str, str] = {}
    for j in jobs:
        if j.name in seen:
            raise TraceError(f"{j.where}: column name: job name {j.name!r} is already used at {seen[j.name]}")
        seen[j.name] = j.where
    jobs.sort(key=lambda j: j.submit)  # stable: keeps file and line order for equal times
    return jobs
