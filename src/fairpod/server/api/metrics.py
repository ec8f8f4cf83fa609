"""Prometheus metrics at ``/metrics``, named in the style of Kueue's (``fairpod_...``); see docs/metrics.md.

Gauges come from the engine's snapshot and the store at scrape time; the engine's figures from a consistent view
that never waits for a turn (``Core.engine_view``: at most one turn old, ``fairpod_figures_as_of_turn`` says which). Counters and the wait/run-time
histograms are derived from the store (events and job records), so they survive a control-plane restart
unchanged; each scrape reads only the events and the jobs' starts and ends since the previous one
(:mod:`fairpod.server.accounting.job_tallies`); only the engine-cycle histogram and ``fairpod_scheduler_cycles_total`` live in memory and
start again from zero (Prometheus' ``rate()`` handles such resets).
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from operator import attrgetter
from typing import Any, cast

from fastapi import APIRouter, FastAPI, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from fairpod import __version__
from fairpod.governance.snapshot import Snapshot
from fairpod.model.jobs import JobState
from fairpod.server.access.auth import Auth, Principal
from fairpod.server.accounting.figures import instance_types, team_figures
from fairpod.server.accounting.job_tallies import JobTallies
from fairpod.server.core.api import Core
from fairpod.server.errors import Problem
from fairpod.server.keepers import diskfull, outage
from fairpod.server.runtime import heap
from fairpod.store import waits
from fairpod.store.tables import EventRow, JobRow

WAIT_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)
RUN_BUCKETS = (10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0, 259200.0,
               604800.0)  # fmt: skip
# The engine's reasons for a job it tried and could not start (fairpod.governance: quota, placement, scheduler).
INADMISSIBLE_PREFIXES = ("over quota", "borrow limit reached", "waiting for reclaim", "no idle", "no healthy",
                         "needs ", "waiting for capacity")  # fmt: skip
COUNTED_EVENTS = ("JobAdmitted", "JobPreempted", "JobRestarting", "ReplicaUsage", "Goodput")
PREEMPT_REASONS = ("reclaim", "priority", "fair-share")  # fairpod.governance.decisions.Preempt.kind
FINAL_STATES = tuple(s.value for s in JobState if s.finished)
RESOURCES = (("accelerators", 1.0), ("cpu", 1 / 1000), ("memory", 1024 * 1024))  # from (acc, mcpu, MiB)


_TEAM, _REASON = attrgetter("team"), attrgetter("reason")


def inadmissible(reason: str) -> bool:
    """A pending job the engine tried and could not start (vs. one not tried since it entered the queue)."""
    return reason.startswith(INADMISSIBLE_PREFIXES)


def pending_counts(snap: Snapshot) -> dict[str, list[int]]:
    """Team -> [active, inadmissible, 0]: its pending jobs not tried yet and tried (:func:`inadmissible`).

    Every turn that a scrape read lately computes these again (core.published), over the ~120,000 pending jobs of
    10,000 nodes, so nothing here is a Python pass per job, nor a tuple per job (counting ``(team, reason)`` pairs
    took ~60 ms a turn): each distinct reason is judged once, a team's pending jobs are its queue's length, and
    only the jobs of the smaller class (tried or not) are counted by team, in C."""
    counts: dict[str, list[int]] = {name: [0, 0, 0] for name in snap.teams}
    pending = snap.pending.values()
    reasons = Counter(map(_REASON, pending))
    bad = {r for r in reasons if inadmissible(r)}
    n_bad = sum(reasons[r] for r in bad)
    queued = {name: len(t.queue) for name, t in snap.teams.items()}
    per_team = queued if sum(queued.values()) == len(snap.pending) else Counter(map(_TEAM, pending))
    few, col = (bad, 1) if n_bad <= len(snap.pending) - n_bad else (reasons.keys() - bad, 0)
    for team, n in Counter(map(_TEAM, itertools.compress(pending, map(few.__contains__, map(_REASON, pending))))).items():
        if team in counts:
            counts[team][col] = n
    for team, n in per_team.items():
        if team in counts:
            counts[team][1 - col] = n - counts[team][col]
    return counts


def engine_figures(cp: Core, snap: Snapshot) -> dict[str, Any]:
    """The figures ``/metrics`` reads of the engine and the core's memory, for every team (the scrape keeps those
    its reader sees): run under the core's lock by ``Core.engine_view``, by a scrape or at the end of a turn."""
    cluster, teams, lent = [], [], []
    for it in instance_types(snap):
        nodes = snap.by_type.get(it, [])
        for d, (res, k) in enumerate(RESOURCES):
            cluster.append((it, res, sum(n.cap[d] for n in nodes) * k,
                            sum(n.cap[d] for n in nodes if n.schedulable) * k,
                            sum(n.cap[d] - n.free[d] for n in nodes) * k))
        for f in team_figures(snap, it):
            teams += [(f.team, it, res, f.quota[d] * k, f.used[d] * k, f.borrowed[d] * k)
                      for d, (res, k) in enumerate(RESOURCES)]
            lent.append((f.team, it, f.lent))
    counts = pending_counts(snap)
    for team, n in Counter(map(_TEAM, snap.running.values())).items():
        if team in counts:
            counts[team][2] += n
    settings = [(name, t.weight, t.borrow_limit if t.borrows else 0) for name, t in sorted(snap.teams.items())]
    hist = cp.usage.cycles
    return {"cluster": cluster, "teams": teams, "lent": lent, "counts": counts, "settings": settings,
            "budgets": cp.budget_rows(), "cycle_hist": (list(hist.counts), hist.total, hist.sum),
            "last_cycle": cp.cycle_seconds, "cycles": cp.cycles}


class EventCounters:
    """Totals of admissions, preemptions (by reason) and restarts per team, read from the event log once:
    each scrape reads only the events after the last one it counted."""

    def __init__(self) -> None:
        self.last_id = 0
        self.admitted: dict[str, int] = {}
        self.preempted: dict[tuple[str, str], int] = {}
        self.restarts: dict[str, int] = {}
        self.cpu_seconds: dict[str, float] = {}  # what ended replicas used (fairpod.sandbox), per team
        self.memory_peak: dict[str, int] = {}
        self.kept: dict[str, float] = {}  # accelerator-seconds that produced kept progress (server.accounting.goodput), per team
        self.lost: dict[tuple[str, str], float] = {}  # (team, cause) -> accelerator-seconds lost
        self.lock = threading.Lock()

    def update(self, cp: Core) -> None:
        with self.lock, cp.queries.connect() as conn:
            q = (select(EventRow.id, EventRow.kind, EventRow.team, EventRow.data)
                 .where(EventRow.id > self.last_id, EventRow.kind.in_(COUNTED_EVENTS)).order_by(EventRow.id))
            for eid, kind, row_team, row_data in conn.execute(q):
                team = cast(str, row_team or "(none)")  # the columns are typed loosely: a team's name or None
                data = cast(dict[str, Any] | None, row_data)  # the event's JSON object or None
                if kind == "JobAdmitted":
                    self.admitted[team] = self.admitted.get(team, 0) + 1
                elif kind == "ReplicaUsage":
                    d = data or {}
                    if isinstance(d.get("cpu_seconds"), int | float):
                        self.cpu_seconds[team] = self.cpu_seconds.get(team, 0.0) + float(d["cpu_seconds"])
                    if isinstance(d.get("memory_peak_bytes"), int):
                        self.memory_peak[team] = max(self.memory_peak.get(team, 0), d["memory_peak_bytes"])
                elif kind == "Goodput":
                    d = data or {}
                    self.kept[team] = self.kept.get(team, 0.0) + float(d.get("kept") or 0.0)
                    if d.get("cause"):
                        key2 = (team, str(d["cause"]))
                        self.lost[key2] = self.lost.get(key2, 0.0) + float(d.get("lost") or 0.0)
                elif kind == "JobPreempted":
                    key = (team, str((data or {}).get("preemption") or "unknown"))
                    self.preempted[key] = self.preempted.get(key, 0) + 1
                else:
                    self.restarts[team] = self.restarts.get(team, 0) + 1
                self.last_id = cast(int, eid)


def _hist_family(name: str, doc: str, data: dict[str, tuple[list[int], int, float]],
                 buckets: tuple[float, ...], teams: list[str]) -> HistogramMetricFamily:
    """One histogram per team of ``teams`` (all zero for a team without observations yet)."""
    fam = HistogramMetricFamily(name, doc, labels=["team"])
    for team in teams:
        counts, n, total = data.get(team, ([0] * len(buckets), 0, 0.0))
        fam.add_metric([team], [(_le(b), c) for b, c in zip(buckets, counts, strict=True)] + [("+Inf", n)], total)
    return fam


def _le(b: float) -> str:
    return str(int(b)) if float(b).is_integer() else repr(b)


class FairpodCollector(Collector):
    def __init__(self, cp: Core) -> None:
        self.cp = cp
        self.events = EventCounters()
        self.jobs = JobTallies(WAIT_BUCKETS, RUN_BUCKETS)
        self.principal: Principal | None = None

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        cp = self.cp
        visible = self.principal.visible_teams() if self.principal else None
        teams = None if visible is None else set(visible)

        def shown(team: str) -> bool:
            return teams is None or team in teams

        info = GaugeMetricFamily("fairpod_build_info", "fairpod's version (always 1)", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        yield from diskfull.metrics(cp)
        yield from outage.metrics(cp)

        cap = GaugeMetricFamily("fairpod_cluster_capacity", "Capacity of the cluster's nodes (cpu in cores, "
                                "memory in bytes)", labels=["instance_type", "resource"])
        sched = GaugeMetricFamily("fairpod_cluster_schedulable_capacity", "Capacity of the schedulable nodes",
                                  labels=["instance_type", "resource"])
        used = GaugeMetricFamily("fairpod_cluster_resource_usage", "Resources held by running jobs",
                                 labels=["instance_type", "resource"])
        quota = GaugeMetricFamily("fairpod_team_nominal_quota", "A team's quota (compute allocation)",
                                  labels=["team", "instance_type", "resource"])
        usage = GaugeMetricFamily("fairpod_team_resource_usage", "Resources a team's running jobs hold",
                                  labels=["team", "instance_type", "resource"])
        borrowed = GaugeMetricFamily("fairpod_team_borrowed_resources", "Usage above the team's quota",
                                     labels=["team", "instance_type", "resource"])
        lent = GaugeMetricFamily("fairpod_team_lent_resources", "The team's idle quota other teams use "
                                 "(accelerators)", labels=["team", "instance_type", "resource"])
        weight = GaugeMetricFamily("fairpod_team_fair_share_weight", "Fair-share weight (0..100)", labels=["team"])
        limit = GaugeMetricFamily("fairpod_team_borrowing_limit_percent", "How far above its quota a team may "
                                  "borrow, in percent of its quota (0 if it does not borrow)", labels=["team"])
        pending = GaugeMetricFamily("fairpod_pending_jobs", "Pending jobs; status=inadmissible: the engine tried "
                                    "them and gave a reason, active: not tried since they entered the queue",
                                    labels=["team", "status"])
        running = GaugeMetricFamily("fairpod_running_jobs", "Admitted jobs that hold resources", labels=["team"])
        stopping = GaugeMetricFamily("fairpod_preempting_jobs", "Preempted jobs whose replicas are stopping",
                                     labels=["team"])

        got = cp.engine_view(("metrics",), lambda snap: engine_figures(cp, snap))  # never waits for a turn
        if got is None:  # a first scrape waited 30 s for a turn that holds the core: it fails, and says why
            raise Problem(503, "busy", "the control plane has been in one scheduling turn for 30 s and has published no "
                          "figures for /metrics yet; scrape again in a moment (the turn publishes them when it ends)")
        fig, as_of = got
        for it, res, c, sc, u in fig["cluster"]:
            cap.add_metric([it, res], c)
            sched.add_metric([it, res], sc)
            used.add_metric([it, res], u)
        for team, it, res, q, u, b in fig["teams"]:
            if shown(team):
                quota.add_metric([team, it, res], q)
                usage.add_metric([team, it, res], u)
                borrowed.add_metric([team, it, res], b)
        for team, it, n in fig["lent"]:
            if shown(team):
                lent.add_metric([team, it, "accelerators"], n)
        for name, w, lim in fig["settings"]:
            if shown(name):
                weight.add_metric([name], w)
                limit.add_metric([name], lim)
        counts = {name: [*c, 0] for name, c in fig["counts"].items() if shown(name)}
        budget_rows = [b for b in fig["budgets"] if shown(b["team"])]
        hist_snapshot, last_cycle, cycles = fig["cycle_hist"], fig["last_cycle"], fig["cycles"]
        view_turn = GaugeMetricFamily("fairpod_figures_as_of_turn", "The reconcile turn the engine's figures here "
                                      "are of (they are at most one turn old: a scrape never waits for a turn)")
        view_turn.add_metric([], as_of.turn)
        yield view_turn
        q_stop = select(JobRow.team, func.count()).where(JobRow.state == JobState.PREEMPTED.value).group_by(JobRow.team)
        with cp.queries.connect() as conn:
            for team, n in conn.execute(q_stop):
                if team in counts:
                    counts[team][3] += n
        for name, (act, inad, run, stop) in sorted(counts.items()):
            pending.add_metric([name, "active"], act)
            pending.add_metric([name, "inadmissible"], inad)
            running.add_metric([name], run)
            stopping.add_metric([name], stop)
        yield from (cap, sched, used, quota, usage, borrowed, lent, weight, limit, pending, running, stopping)
        b_used = GaugeMetricFamily("fairpod_team_budget_used_hours", "Accelerator-hours a team used in the current "
                                   "period of its budget", labels=["team", "instance_type", "period"])
        b_hours = GaugeMetricFamily("fairpod_team_budget_hours", "A team's budget: accelerator-hours per period",
                                    labels=["team", "instance_type", "period"])
        b_ratio = GaugeMetricFamily("fairpod_team_budget_used_ratio", "Used / budget (0.8: lowest priority, 1: no "
                                    "borrowing, or held with a hard cap)", labels=["team", "instance_type", "period"])
        for b in budget_rows:
            lab = [b["team"], b["instance_type"], b["period"]]
            b_used.add_metric(lab, b["used_hours"])
            b_hours.add_metric(lab, b["accelerator_hours"])
            b_ratio.add_metric(lab, b["used_ratio"])
        yield from (b_used, b_hours, b_ratio)

        self.events.update(cp)
        ev = self.events
        known = sorted({t.name for t in cp.spec.teams} | set(ev.admitted) | set(ev.restarts)
                       | {t for t, _ in ev.preempted})
        known = [t for t in known if shown(t)]
        adm = CounterMetricFamily("fairpod_admitted_jobs", "Admissions (a job admitted again after a preemption "
                                  "or restart counts again)", labels=["team"])
        rst = CounterMetricFamily("fairpod_job_restarts", "Automatic restarts after a failure (auto-resume)",
                                  labels=["team"])
        for team in known:
            adm.add_metric([team], ev.admitted.get(team, 0))
            rst.add_metric([team], ev.restarts.get(team, 0))
        pre = CounterMetricFamily("fairpod_preempted_jobs", "Preemptions by reason: reclaim (a lender took its "
                                  "quota back), priority, fair-share", labels=["team", "reason"])
        for team in known:
            reasons = set(PREEMPT_REASONS) | {r for t, r in ev.preempted if t == team}
            for reason in sorted(reasons):
                pre.add_metric([team, reason], ev.preempted.get((team, reason), 0))
        fin = CounterMetricFamily("fairpod_finished_jobs", "Jobs that finished, by final state",
                                  labels=["team", "state"])
        self.jobs.update(cp.queries.engine)
        finished = {(t, st): 0 for t in known for st in FINAL_STATES}
        finished.update((k, n) for k, n in self.jobs.finished.items() if shown(k[0]))
        for (team, state), n in sorted(finished.items()):
            fin.add_metric([team, state], n)
        cpu = CounterMetricFamily("fairpod_job_cpu_seconds", "CPU-seconds used by the ended replicas of the "
                                  "team's jobs, read from their cgroups", labels=["team"])
        peak = GaugeMetricFamily("fairpod_job_memory_peak_bytes", "The highest peak memory of an ended replica of "
                                 "the team's jobs, read from its cgroup", labels=["team"])
        for team in known:
            cpu.add_metric([team], ev.cpu_seconds.get(team, 0.0))
            peak.add_metric([team], ev.memory_peak.get(team, 0))
        kept = CounterMetricFamily("fairpod_goodput_kept_accelerator_seconds", "Accelerator-seconds whose progress "
                                   "was kept (up to the last checkpoint, or the whole of a finished attempt)",
                                   labels=["team"])
        lost = CounterMetricFamily("fairpod_goodput_lost_accelerator_seconds", "Accelerator-seconds lost (work since "
                                   "the last checkpoint) by cause: preemption, failure, restart, readiness, hang, "
                                   "cancelled", labels=["team", "cause"])
        for team in sorted({*known, *(t for t in ev.kept if shown(t))}):
            kept.add_metric([team], ev.kept.get(team, 0.0))
        for (team, cause), v in sorted(ev.lost.items()):
            if shown(team):
                lost.add_metric([team, cause], v)
        yield from (adm, pre, rst, fin, cpu, peak, kept, lost)

        wait = self.jobs.wait.teams
        yield _hist_family("fairpod_admission_wait_time_seconds", "From submission to the first admission",
                           wait, WAIT_BUCKETS, sorted(set(known) | {t for t in wait if shown(t)}))
        run_t = self.jobs.run.teams
        yield _hist_family("fairpod_job_run_time_seconds", "From the first admission to the end, of finished jobs",
                           run_t, RUN_BUCKETS, sorted(set(known) | {t for t in run_t if shown(t)}))

        nodes_f = GaugeMetricFamily("fairpod_nodes", "Nodes by health status",
                                    labels=["instance_group", "instance_type", "health_status"])
        cordoned = GaugeMetricFamily("fairpod_nodes_cordoned", "Cordoned nodes",
                                     labels=["instance_group", "instance_type"])
        schedulable = GaugeMetricFamily("fairpod_nodes_schedulable", "Nodes jobs may start on (healthy and not "
                                        "cordoned)", labels=["instance_group", "instance_type"])
        status = GaugeMetricFamily("fairpod_node_status", "A node's state (1 per node) with its health status and, "
                                   "when it has a fault (pending reboot, pending replacement, quarantined), the fault's "
                                   "type and reason", labels=["node", "instance_group", "health_status", "fault_type",
                                                              "fault_reason"])
        by_health: dict[tuple[str, str, str], int] = {}
        by_group: dict[tuple[str, str], list[int]] = {}
        for n in cp.queries.list_nodes():
            status.add_metric([n.name, n.instance_group, n.health_status.value, n.fault_type or "",
                               n.fault_reason or ""], 1)
            k = (n.instance_group, n.instance_type, n.health_status.value)
            by_health[k] = by_health.get(k, 0) + 1
            g = by_group.setdefault((n.instance_group, n.instance_type), [0, 0])
            g[0] += int(n.cordoned)
            g[1] += int(n.schedulable)
        for k, v in sorted(by_health.items()):
            nodes_f.add_metric(list(k), v)
        for (grp, it), (c, s) in sorted(by_group.items()):
            cordoned.add_metric([grp, it], c)
            schedulable.add_metric([grp, it], s)
        yield from (nodes_f, cordoned, schedulable, status)

        counts_c, total, summ = hist_snapshot
        cyc = HistogramMetricFamily("fairpod_scheduler_cycle_duration_seconds",
                                    "Duration of the engine's scheduling cycles since this control plane started")
        cyc.add_metric([], [(_le(b), c) for b, c in zip(cp.usage.cycles.buckets, counts_c, strict=True)]
                       + [("+Inf", total)], summ)
        yield cyc
        last = GaugeMetricFamily("fairpod_scheduler_last_cycle_duration_seconds", "Duration of the last cycle")
        last.add_metric([], last_cycle)
        yield last
        c = CounterMetricFamily("fairpod_scheduler_cycles", "Engine cycles since this control plane started")
        c.add_metric([], cycles)
        yield c
        yield from cp.turns.family()
        yield from _gc_families()
        yield _write_waits()


def _gc_families() -> Iterator[Metric]:
    """The cycle collector's pauses in this process (``server/runtime/heap.py``; zero where ``heap.watch`` was not
    called)."""
    count, seconds, longest = heap.PAUSES.figures()
    n = CounterMetricFamily("fairpod_gc_collections", "Cycle collections of the server process, per generation",
                            labels=["generation"])
    t = CounterMetricFamily("fairpod_gc_pause_seconds", "Seconds the server process spent in cycle collections "
                            "(every thread waits meanwhile), per generation", labels=["generation"])
    for g in range(3):
        n.add_metric([str(g)], count[g])
        t.add_metric([str(g)], seconds[g])
    longest_g = GaugeMetricFamily("fairpod_gc_longest_pause_seconds", "The longest cycle collection so far")
    longest_g.add_metric([], longest)
    yield from (n, t, longest_g)


def _write_waits() -> Metric:
    """The waits for the database's write lock (``store/waits.py``): the server's own process as ``core``, each API
    worker's as it reported them with its last wake (``worker-<pid>``)."""
    fam = HistogramMetricFamily("fairpod_store_write_wait_seconds", "Seconds a write transaction waited for SQLite's "
                                "write lock (its BEGIN IMMEDIATE), per server process", labels=["process"])
    for name, f in waits.every():
        cum = list(itertools.accumulate(f["counts"]))
        fam.add_metric([name], [(_le(b), c) for b, c in zip(waits.BUCKETS, cum, strict=False)] + [("+Inf", cum[-1])],
                       f["sum"])
    return fam


def add_routes(app_router: FastAPI | APIRouter, cp: Core) -> None:
    """``GET /metrics`` (Prometheus text format; bearer token; members see only their teams' series)."""
    collector = FairpodCollector(cp)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    lock = threading.Lock()

    @app_router.get("/metrics", tags=["metrics"], response_class=Response)
    def metrics(p: Auth) -> Response:
        with lock:  # the collector reads the caller's visibility
            collector.principal = p
            try:
                body = generate_latest(registry)
            finally:
                collector.principal = None
        return Response(body, media_type=CONTENT_TYPE_LATEST)
