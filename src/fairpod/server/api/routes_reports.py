"""Usage reports: ``GET /api/v1/reports/usage?from=&to=&team=``.

Per team, instance type and (UTC) day: accelerator-hours used, split into within quota and borrowed, plus
the team's quota-hours and the hours it lent; per task: its run windows, state, priority and the
accelerator-hours it used in the period. Usage comes from the usage samples the control plane records
(``fairpod.server.accounting.usage``), tasks from the job records and their lifecycle events.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter, Query

from fairpod.model.jobs import JobState
from fairpod.model.spec import ClusterSpec
from fairpod.server.access.auth import Auth, Principal
from fairpod.server.accounting import goodput
from fairpod.server.api.api_rules import rules
from fairpod.server.core.api import Core
from fairpod.server.errors import Problem
from fairpod.store import Job
from fairpod.store.usage import TEAM

MAX_DAYS = 400
# a period reported on lies within these (UTC): every day in it, and the day after, is a datetime
EARLIEST = dt.datetime(1, 1, 2, tzinfo=dt.UTC).timestamp()
LATEST = dt.datetime(9999, 12, 30, tzinfo=dt.UTC).timestamp()
WHEN = {"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"},
                  {"type": "string", "maxLength": 0, "description": "empty: the default"}]}
RULES = rules({422: ["from is before to", f"the period is at most {MAX_DAYS} days",
                     "from and to lie between 0001-01-02 and 9999-12-30 (UTC)"]})
OPENS = "JobAdmitted"
CLOSES = ("JobPreempted", "JobRestarting", "JobRequeued", "JobSucceeded", "JobFailed", "JobCancelled")


def parse_time(value: str, what: str, *, end: bool) -> float:
    """``YYYY-MM-DD`` (a whole UTC day: its start, or with ``end`` the start of the next day) or an ISO 8601
    date and time (UTC unless it names an offset)."""
    v = value.strip()
    try:
        if len(v) == 10:
            day = dt.date.fromisoformat(v)
            start = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()
            return start + 86400 if end else start  # the end of 9999-12-31 is no datetime, but a timestamp
        t = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise Problem(422, "invalid request", f"{what}: {value!r} is not a date (YYYY-MM-DD) or an ISO 8601 "
                      "date and time") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def day_edges(since: float, until: float) -> list[float]:
    """``since``, every UTC midnight strictly between, ``until``."""
    edges = [since]
    d = dt.datetime.fromtimestamp(since, dt.UTC).date() + dt.timedelta(days=1)
    while (t := dt.datetime(d.year, d.month, d.day, tzinfo=dt.UTC).timestamp()) < until:
        edges.append(t)
        d += dt.timedelta(days=1)
    edges.append(until)
    return edges


def run_windows(job: Job, events: list[Any], now: float) -> list[list[float]]:
    """The job's [start, end] spans holding resources: from each admission to the next preemption, restart or
    end; the span still open ends now (or at the job's end if its closing event is missing)."""
    out: list[list[float]] = []
    start: float | None = None
    for e in events:
        if e.kind == OPENS:
            if start is not None:
                out.append([start, e.ts])
            start = e.ts
        elif e.kind in CLOSES and start is not None:
            out.append([start, e.ts])
            start = None
    if start is not None:
        out.append([start, job.finished_at if job.finished_at is not None else now])
    return out


def usage_report(cp: Core, since: float, until: float, teams: list[str] | None) -> dict[str, Any]:
    now = cp.clock()
    edges = day_edges(since, until)
    ints = cp.queries.integrals(edges, min(until, now))  # the days' hourly buckets, and the samples for the rest
    usage: list[dict[str, Any]] = []
    totals: dict[tuple[str, str], dict[str, float]] = {}
    for (kind, team, itype), figs in sorted(ints.series.items()):
        if kind != TEAM or (teams is not None and team not in teams):
            continue
        tot = totals.setdefault((team, itype), {"accelerator_hours": 0.0, "within_quota_hours": 0.0,
                                                "borrowed_hours": 0.0, "lent_hours": 0.0, "quota_hours": 0.0})
        for i in range(len(edges) - 1):
            used, borrowed = figs["acc"][i] / 3600, figs["borrowed"][i] / 3600
            quota, lent = figs["cap_acc"][i] / 3600, figs["lent"][i] / 3600
            if not (used or quota or lent):
                continue
            row = {"accelerator_hours": used, "within_quota_hours": used - borrowed, "borrowed_hours": borrowed,
                   "lent_hours": lent, "quota_hours": quota}
            for k, v in row.items():
                tot[k] += v
            usage.append({"date": dt.datetime.fromtimestamp(edges[i], dt.UTC).date().isoformat(), "team": team,
                          "instance_type": itype, **{k: round(v, 4) for k, v in row.items()},
                          "utilization": round(used / quota, 4) if quota else None,
                          "recorded_hours": round(ints.covered[i] / 3600, 4)})
    usage.sort(key=lambda r: (r["date"], r["team"], r["instance_type"]))
    jobs = cp.queries.jobs_between(since, until, teams)
    events = cp.queries.job_lifecycle_events([j.id for j in jobs], (OPENS, *CLOSES))
    by_job: dict[int, list[Any]] = {}
    for e in events:
        if e.job_id is not None:  # a lifecycle event always names its job
            by_job.setdefault(e.job_id, []).append(e)
    tasks = []
    for j in jobs:
        wins = run_windows(j, by_job.get(j.id, []), now)
        inside = [[max(a, since), min(b, until)] for a, b in wins if b > since and a < until]
        acc = j.nodes * j.acc
        end = j.finished_at if j.finished_at is not None else (now if j.first_started_at is not None else None)
        tasks.append({
            "id": j.id, "name": j.name, "team": j.team, "instance_type": j.instance_type, "nodes": j.nodes,
            "accelerators": acc, "priority": j.spec.priority, "priority_weight": j.priority,
            "state": j.state.value, "submitted_at": iso(j.submit_time), "first_started_at": iso(j.first_started_at),
            "finished_at": iso(j.finished_at),
            "wait_seconds": None if j.first_started_at is None else round(j.first_started_at - j.submit_time, 3),
            "run_seconds": None if end is None or j.first_started_at is None else round(end - j.first_started_at, 3),
            "run_windows": [[iso(a), iso(b)] for a, b in inside],
            "accelerator_hours": round(sum(b - a for a, b in inside) * acc / 3600, 4),
            "preemptions": j.preemptions, "restarts": j.attempt,
            "running_now": j.state in (JobState.RUNNING, JobState.PREEMPTED),
        })  # fmt: skip
    first, last = cp.queries.usage_span()
    # samples are deleted a while after they are rolled up into buckets: the oldest bucket may be older
    first = min((t for t in (first, cp.queries.first_rollup()) if t is not None), default=None)
    return {
        "from": iso(since), "to": iso(until), "timezone": "UTC",
        "samples": {"first": iso(first), "last": iso(last)},
        "usage": usage,
        "totals": [{"team": t, "instance_type": it, **{k: round(v, 4) for k, v in tot.items()},
                    "utilization": round(tot["accelerator_hours"] / tot["quota_hours"], 4)
                    if tot["quota_hours"] else None} for (t, it), tot in sorted(totals.items())],
        "groups": group_totals(cp.spec, totals),
        "tasks": tasks,
        "goodput": goodput_of(cp, since, until, teams),  # per team, and the cluster's under "*"
        "budgets": cp.budget_rows(teams),  # the current period of every budget (docs/policies.md)
    }  # fmt: skip


def goodput_of(cp: Core, since: float, until: float, teams: list[str] | None) -> dict[str, Any]:
    """Goodput per team (and the cluster's under "*") of the attempts that ended in the period
    (:mod:`fairpod.server.accounting.goodput`)."""
    gp = [e for e in cp.queries.list_events(kind=goodput.EVENT, limit=None, ts_from=since, ts_to=until)
          if teams is None or e.team in teams]
    return goodput.by_team(gp)


def group_totals(spec: ClusterSpec, totals: dict[tuple[str, str], dict[str, float]]) -> list[dict[str, Any]]:
    """The period's totals rolled up by group (parents before children): the sums over the teams below each group
    that the report shows; ``borrowed_hours`` is what those teams borrowed, from inside the group or outside."""
    below: dict[str, set[str]] = {}
    for g in spec.groups_top_down():
        below[g.name] = set()
    for t in spec.teams:
        up = spec.group(t.group) if t.group else None
        while up is not None and up.name in below:
            below[up.name].add(t.name)
            up = spec.group(up.parent) if up.parent else None
    out = []
    for name, members in below.items():
        for it in sorted({it for (_, it) in totals}):
            rows = [v for (t, i), v in totals.items() if i == it and t in members]
            if not rows:
                continue
            tot = {k: round(sum(r[k] for r in rows), 4) for k in ("quota_hours", "accelerator_hours",
                                                                 "within_quota_hours", "borrowed_hours", "lent_hours")}
            grp = spec.group(name)
            out.append({"group": name, "parent": grp.parent if grp else None, "instance_type": it, **tot,
                        "utilization": round(tot["accelerator_hours"] / tot["quota_hours"], 4)
                        if tot["quota_hours"] else None,
                        "teams": sorted(t for (t, i) in totals if i == it and t in members)})
    return out


# the period and teams of a report (both report routes)
FROM = Query(default=None, alias="from", description="YYYY-MM-DD (UTC) or ISO date-time; default: 7 days before 'to'",
             json_schema_extra=WHEN)
TO = Query(default=None, description="YYYY-MM-DD (inclusive, UTC) or ISO date-time; default: now",
           json_schema_extra=WHEN)
TEAMS = Query(default=None, description="only these teams (repeatable)")


def add_routes(api: APIRouter, cp: Core) -> None:
    @api.get("/reports/usage", tags=["reports"], openapi_extra=RULES)
    def report_usage(
        p: Auth,
        from_: str | None = FROM,
        to: str | None = TO,
        team: list[str] | None = TEAMS,
    ) -> dict[str, Any]:
        since, until = period(cp, from_, to)
        return usage_report(cp, since, until, teams_asked(cp, p, team, until))

    @api.get("/reports/goodput", tags=["reports"], openapi_extra=RULES)
    def report_goodput(
        p: Auth,
        from_: str | None = FROM,
        to: str | None = TO,
        team: list[str] | None = TEAMS,
    ) -> dict[str, Any]:
        """The ``goodput`` of ``/reports/usage`` alone (the dashboard's teams page): without the usage and task
        rows, which at datacenter size are megabytes and seconds."""
        since, until = period(cp, from_, to)
        return {"from": iso(since), "to": iso(until), "timezone": "UTC",
                "goodput": goodput_of(cp, since, until, teams_asked(cp, p, team, until))}


def period(cp: Core, from_: str | None, to: str | None) -> tuple[float, float]:
    """A report's period from its ``from`` and ``to`` (default: the 7 days before now), checked."""
    until = parse_time(to, "to", end=True) if to else cp.clock()
    since = parse_time(from_, "from", end=False) if from_ else until - 7 * 86400
    if since >= until:
        raise Problem(422, "invalid request", f"'from' ({iso(since)}) must be before 'to' ({iso(until)})")
    if until - since > MAX_DAYS * 86400:
        raise Problem(422, "invalid request", f"the period is longer than {MAX_DAYS} days; ask for less")
    if since < EARLIEST or until > LATEST:
        raise Problem(422, "invalid request", "'from' and 'to' must lie between 0001-01-02 and 9999-12-30")
    return since, until


def teams_asked(cp: Core, p: Principal, team: list[str] | None, until: float) -> list[str] | None:
    """The teams a report covers: those asked for (each visible to ``p`` and existing now or before ``until``),
    else all that ``p`` sees (None: every team)."""
    visible = p.visible_teams()
    if not team:
        return visible
    known = {t.name for t in cp.spec.teams}
    unknown = [t for t in team if t not in known and (visible is None or t in visible)]
    hidden = [t for t in team if visible is not None and t not in visible]
    if hidden:
        raise Problem(403, "forbidden", f"user {p.name} is not a member of team(s) {', '.join(hidden)}")
    if unknown and not cp.queries.jobs_between(0, until, unknown):
        raise Problem(404, "no such team", f"no team {', '.join(unknown)} now or in the past")
    return list(team)
