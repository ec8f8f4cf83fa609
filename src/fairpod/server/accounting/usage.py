"""Usage over time: the sampler the reconcile loop calls, and the history the dashboard's trends read.

``UsageSampler.tick(cp)`` runs once per reconcile turn (under the control plane's lock). It computes the
figures of every instance group and every team from the engine's snapshot and writes a sample to the store
when they changed (at most every ``min_interval`` seconds) or when ``heartbeat`` seconds have passed
without a change (old samples go by ``policy.retention_days``, see ``fairpod.server.keepers.retention``). It also
times the engine's cycles for ``/metrics``.

Samples are a step function: a sample's figures hold until the next sample, but never for longer than
``usage_math.MAX_HOLD`` seconds (a longer gap means the control plane was down; that time is not counted).
``usage_math.integrate`` turns samples into value x seconds per time bucket; the sampler sums its samples into
buckets as it goes (``fairpod.server.accounting.rollups``), which the trends of the dashboard (mean per bucket), the
accelerator-hours of the usage report (per day) and the budgets read.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import itemgetter, sub
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from fairpod.governance.snapshot import Snapshot
from fairpod.model.spec import ClusterSpec
from fairpod.server.accounting.figures import instance_types, team_figures
from fairpod.server.accounting.rollups import EVERY as ROLL_EVERY
from fairpod.server.accounting.rollups import PASS_ROWS as ROLL_ROWS
from fairpod.server.core.api import Busy, Core
from fairpod.server.errors import Problem
from fairpod.store import StoreError
from fairpod.store.usage import GROUP, TEAM, UsageSample

log = logging.getLogger("fairpod.usage")

MIN_INTERVAL = 2.0  # seconds between two samples, at least
HEARTBEAT = 60.0  # a sample at least this often, even when nothing changes
CYCLE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


@dataclass
class CycleHistogram:
    """Engine cycle durations seen since this control plane started (in memory: resets on restart)."""

    buckets: tuple[float, ...] = CYCLE_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * len(CYCLE_BUCKETS))
    total: int = 0
    sum: float = 0.0

    def observe(self, v: float) -> None:
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1
        self.total += 1
        self.sum += v


def current_samples(cp: Core, groups_of: dict[str, str]) -> list[UsageSample]:
    """The figures now: one series per instance group, one per team and instance type it has quota on or uses."""
    return cp.engine_read(lambda snap: samples_of(snap, cp.spec, groups_of))


def samples_of(snap: Snapshot, spec: ClusterSpec, groups_of: dict[str, str], teams: bool = True
               ) -> list[UsageSample]:
    """:func:`current_samples` of the engine's snapshot ``snap`` under ``spec``; without the teams' series when
    not ``teams`` (500 teams on 10 instance types take most of the time)."""
    out: list[UsageSample] = []
    by_group: dict[str | None, list[Any]] = {}  # one pass over the nodes, not one per instance group
    for name, n in snap.nodes.items():
        by_group.setdefault(groups_of.get(name), []).append(n)
    for g in spec.cluster.instance_groups:
        nodes = by_group.get(g.name, [])
        caps, frees = [n.cap for n in nodes], [n.free for n in nodes]  # the sums in C: 10,000 nodes x 3 x 2
        cap = [sum(map(itemgetter(d), caps)) for d in range(3)]
        used = [sum(map(sub, map(itemgetter(d), caps), map(itemgetter(d), frees))) for d in range(3)]
        out.append(UsageSample(
            GROUP, g.name, g.node_type, acc=used[0], vcpu=used[1] / 1000, memory_gib=used[2] / 1024,
            cap_acc=cap[0], cap_vcpu=cap[1] / 1000, cap_memory_gib=cap[2] / 1024, nodes=len(nodes),
            healthy_nodes=sum(1 for n in nodes if n.schedulable),
        ))  # fmt: skip
    for it in instance_types(snap) if teams else ():
        for f in team_figures(snap, it):
            q, u = f.quota, f.used
            out.append(UsageSample(
                TEAM, f.team, it, acc=u[0], vcpu=u[1] / 1000, memory_gib=u[2] / 1024, cap_acc=q[0],
                cap_vcpu=q[1] / 1000, cap_memory_gib=q[2] / 1024, borrowed=f.borrowed[0], lent=f.lent,
            ))  # fmt: skip
    return out


class UsageSampler:
    def __init__(self, *, min_interval: float = MIN_INTERVAL, heartbeat: float = HEARTBEAT) -> None:
        self.min_interval = min_interval
        self.heartbeat = heartbeat
        self.last: list[UsageSample] | None = None
        self.latest: tuple[float, list[UsageSample]] | None = None  # the last figures worked out, and when
        self.last_write = -math.inf
        self.cycles_seen = 0
        self.cycles = CycleHistogram()
        self.samples_written = 0
        self.last_roll = -math.inf
        self.groups_of: dict[str, str] = {}  # node -> its instance group, read again when the nodes change
        self._nodes_seen: frozenset[str] = frozenset()

    def tick(self, cp: Core) -> None:
        """One reconcile turn: time the engine's cycle; write a sample if usage changed or a heartbeat is due."""
        if cp.cycles != self.cycles_seen:
            self.cycles_seen = cp.cycles
            self.cycles.observe(cp.cycle_seconds)
        try:
            self._sample(cp)
            if self.last_write - self.last_roll >= ROLL_EVERY:  # samples written since: sum them into buckets
                per_pass = max(15, ROLL_ROWS // max(1, len(self.last or ())))  # ~ROLL_ROWS rows read a pass
                behind = cp.roll_up_usage(self.last_write, per_pass)
                self.last_roll = -math.inf if behind else self.last_write  # behind (an upgrade): again next turn
        except (StoreError, SQLAlchemyError) as e:  # a full disk must not stop scheduling
            log.warning("could not record usage: %s", e)

    def _sample(self, cp: Core) -> None:
        nodes = cp.engine_read(lambda snap: frozenset(snap.nodes))
        if nodes != self._nodes_seen:
            self.groups_of = cp.queries.node_groups()
            self._nodes_seen = nodes
        now = cp.clock()
        since = now - self.last_write
        if since < min(self.min_interval, self.heartbeat):  # nothing would be written: not worth the figures of every team (500 of
            return  # them on 10 instance types took 0.4 s, once per turn)
        samples = current_samples(cp, self.groups_of)
        self.latest = (now, samples)
        if (samples != self.last and since >= self.min_interval) or since >= self.heartbeat:
            cp.record_usage(now, samples)
            self.last, self.last_write = samples, now
            self.samples_written += 1


WINDOWS = {"1h": (3600.0, 120), "6h": (6 * 3600.0, 144), "1d": (86400.0, 144), "7d": (7 * 86400.0, 168)}


def history(cp: Core, window: str, teams: Iterable[str] | None, groups_only: bool = False) -> dict[str, object]:
    """Mean figures per bucket over the last ``window`` (a key of WINDOWS): per instance group and per team (with
    ``groups_only``, per instance group only: what the dashboard's cluster page draws, read from the groups' rows
    alone). ``times`` are the buckets' starts; ``now`` holds the figures at this moment."""
    span, n = WINDOWS[window]
    now = cp.clock()
    step = span / n
    end = math.ceil(now / step) * step  # buckets aligned to the step, the last one holds now
    edges = [end - span + i * step for i in range(n + 1)]
    ints = cp.queries.integrals(edges, now, GROUP if groups_only else None)  # from the rollups where they fit
    visible = None if teams is None else set(teams)
    groups, team_rows = [], []
    for key in sorted(ints.series):
        kind, name, itype = key
        if kind == GROUP:
            groups.append({"name": name, "instance_type": itype,
                           **{f: ints.mean(key, f) for f in ("acc", "vcpu", "memory_gib", "cap_acc", "cap_vcpu",
                                                             "cap_memory_gib", "nodes", "healthy_nodes")}})
        elif visible is None or name in visible:
            team_rows.append({"team": name, "instance_type": itype, "in_use": ints.mean(key, "acc"),
                              "quota": ints.mean(key, "cap_acc"), "borrowed": ints.mean(key, "borrowed"),
                              "lent": ints.mean(key, "lent")})
    sampler = getattr(cp, "usage", None)  # its map of the nodes' groups, kept by every turn: not 10,000 rows a read
    groups_of = sampler.groups_of if isinstance(sampler, UsageSampler) and sampler.groups_of else \
        cp.queries.node_groups()
    now_at, current = now_figures(cp, groups_of, not groups_only)
    now_groups = [{"name": s.name, "instance_type": s.instance_type, "acc": s.acc, "vcpu": s.vcpu,
                   "memory_gib": s.memory_gib, "cap_acc": s.cap_acc, "cap_vcpu": s.cap_vcpu,
                   "cap_memory_gib": s.cap_memory_gib, "nodes": s.nodes, "healthy_nodes": s.healthy_nodes}
                  for s in current if s.kind == GROUP]
    now_teams = [{"team": s.name, "instance_type": s.instance_type, "in_use": s.acc, "quota": s.cap_acc,
                  "borrowed": s.borrowed, "lent": s.lent}
                 for s in current if s.kind == TEAM and (visible is None or s.name in visible)]
    return {"window": window, "from": edges[0], "to": now, "step_seconds": step,
            "times": edges[:-1], "groups": groups, "teams": team_rows,
            "now": {"groups": now_groups, "teams": now_teams}, "now_at": now_at}


def now_figures(cp: Core, groups_of: dict[str, str], teams: bool = True) -> tuple[float, list[UsageSample]]:
    """The figures now and the control plane's time they are of. They are read from the engine's snapshot, which
    only the holder of the control plane's lock may read, and a turn at datacenter size holds it for seconds (the
    dashboard's cluster and teams pages waited for it): the lock is taken only when it is free (never waited for);
    else the answer is the usage sampler's last figures, which every turn works out once its last sample is
    ``MIN_INTERVAL`` old (so they are seconds old at most), as ``queue_positions`` answers with the positions the
    last turn published. Before the sampler's first figures, while a turn runs: 503 "busy". Not ``teams``: the
    instance groups' figures only."""
    sampler = getattr(cp, "usage", None)
    latest = sampler.latest if isinstance(sampler, UsageSampler) else None

    def now(snap: Snapshot) -> tuple[float, list[UsageSample]]:
        return cp.clock(), samples_of(snap, cp.spec, groups_of, teams)

    try:
        return cp.engine_read(now, wait=0)
    except Busy:
        if latest is None:
            raise Problem(503, "busy", "the control plane is in its first scheduling turn and has no usage figures "
                          "yet; ask again in a moment") from None
        return latest


