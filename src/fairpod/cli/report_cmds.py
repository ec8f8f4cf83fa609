"""Reports: ``fairpod report usage`` (accelerator-hours per team, instance type and day; per-task run windows)."""

from __future__ import annotations

import argparse
import sys

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.output import emit, table

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any

USAGE_COLS = [("date", "DATE"), ("team", "TEAM"), ("instance_type", "INSTANCE TYPE"),
              ("quota_hours", "QUOTA ACC-H"), ("accelerator_hours", "USED ACC-H"),
              ("within_quota_hours", "WITHIN QUOTA"), ("borrowed_hours", "BORROWED"), ("lent_hours", "LENT"),
              ("utilization", "UTILISATION")]  # fmt: skip
TASK_COLS = [("id", "ID"), ("name", "TASK"), ("team", "TEAM"), ("priority", "PRIORITY"), ("state", "STATE"),
             ("instance_type", "INSTANCE TYPE"), ("accelerators", "ACC"), ("submitted_at", "SUBMITTED"),
             ("first_started_at", "FIRST STARTED"), ("finished_at", "FINISHED"), ("accelerator_hours", "ACC-H"),
             ("preemptions", "PREEMPTED"), ("restarts", "RESTARTS")]  # fmt: skip
CSV_USAGE = ["date", "team", "instance_type", "quota_hours", "accelerator_hours", "within_quota_hours",
             "borrowed_hours", "lent_hours", "utilization", "recorded_hours"]  # fmt: skip
CSV_TASKS = ["id", "name", "team", "instance_type", "nodes", "accelerators", "priority", "priority_weight", "state",
             "submitted_at", "first_started_at", "finished_at", "wait_seconds", "run_seconds", "run_windows",
             "accelerator_hours", "preemptions", "restarts"]  # fmt: skip


def _date(v: str) -> str:
    """Accept YYYY-MM-DD or an ISO 8601 date and time; the server interprets it (UTC unless an offset is given)."""
    import datetime as dt

    try:
        if len(v) == 10:
            dt.date.fromisoformat(v)
        else:
            dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not a date (YYYY-MM-DD) or an ISO 8601 date and time") from None
    return v


def register(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("report", help="usage reports", description="Reports on how the cluster was used.")
    rs = r.add_subparsers(dest="report_cmd", metavar="REPORT", required=True)
    p = rs.add_parser(
        "usage", help="accelerator-hours per team, instance type and day; tasks with their run windows",
        description="Accelerator-hours per team, instance type and UTC day, split into hours used within the "
        "team's quota and hours borrowed from other teams' idle quota (with the team's quota-hours, the hours it "
        "lent, and its utilisation of quota), and per task: its run windows, state, priority and the "
        "accelerator-hours it used in the period. Admins and viewers see every team, members their own. "
        "Usage comes from the samples the control plane records while it runs.",
        epilog="examples: fairpod report usage --from 2025-06-01 --to 2025-06-30 -o csv > june.csv\n"
        "          fairpod report usage --from 2025-06-01 --to 2025-06-30 --tasks -o csv > june-tasks.csv\n"
        "          fairpod report usage --team smith -o json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="since", type=_date, metavar="DATE",
                   help="first day (YYYY-MM-DD, UTC) or an ISO date-time; default: 7 days before --to")
    p.add_argument("--to", dest="until", type=_date, metavar="DATE",
                   help="last day, included (YYYY-MM-DD, UTC) or an ISO date-time; default: now")
    p.add_argument("--team", action="append", help="only this team (repeatable)")
    p.add_argument("--tasks", action="store_true", help="with -o csv: write the per-task rows instead of the "
                   "per-day usage")
    p.add_argument("-o", "--output", choices=["table", "csv", "json", "yaml"], default="table",
                   help="table (people), csv (spreadsheets), json or yaml (scripts; both parts)")
    p.set_defaults(func=report_usage)


def report_usage(a: argparse.Namespace) -> int:
    if a.tasks and a.output != "csv":
        raise CliError("--tasks goes with -o csv (the table, JSON and YAML outputs hold both parts)")
    rep = Client().get("/reports/usage", **{"from": a.since, "to": a.until, "team": a.team})
    if emit(rep, a.output):
        return 0
    if a.output == "csv":
        import csv

        cols = CSV_TASKS if a.tasks else CSV_USAGE
        w = csv.DictWriter(sys.stdout, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for row in rep["tasks"] if a.tasks else rep["usage"]:
            out: dict[str, Any] = dict(row)
            if a.tasks:
                out["run_windows"] = " ".join(f"{s}/{e}" for s, e in row["run_windows"])
            w.writerow({k: "" if out.get(k) is None else out[k] for k in cols})
        return 0
    print(f"Usage from {rep['from']} to {rep['to']} (UTC); accelerator-hours")
    if rep["samples"]["first"] is None:
        print("(no usage recorded yet: the control plane records usage while it runs)")
    rows = [{**r, "utilization": None if r["utilization"] is None else f"{round(r['utilization'] * 100)} %"}
            for r in rep["usage"]]
    table(rows, USAGE_COLS)
    if rep["totals"]:
        print()
        print("Totals")
        tot = [{**r, "date": "all", "utilization": None if r["utilization"] is None else
                f"{round(r['utilization'] * 100)} %"} for r in rep["totals"]]
        table(tot, USAGE_COLS)
    gp = {t: g for t, g in (rep.get("goodput") or {}).items() if g["goodput"] is not None}
    if gp:
        print()
        print("Goodput (accelerator-hours whose progress was kept, and lost since the last checkpoint, by cause)")
        causes = sorted({c for g in gp.values() for c, v in g["lost_accelerator_seconds"].items() if v})
        table([{"team": "all teams" if t == "*" else t, "kept": round(g["kept_accelerator_seconds"] / 3600, 3),
                "goodput": f"{g['goodput'] * 100:.1f} %",
                **{c: round(g["lost_accelerator_seconds"].get(c, 0.0) / 3600, 3) for c in causes}}
               for t, g in gp.items()],
              [("team", "TEAM"), ("kept", "KEPT ACC-H"), *((c, f"LOST: {c.upper()}") for c in causes),
               ("goodput", "GOODPUT")])
    if rep.get("groups"):
        print()
        print("Totals by group (the teams below each group)")
        table([{**g, "utilization": None if g["utilization"] is None else f"{round(g['utilization'] * 100)} %",
                "teams": ", ".join(g["teams"])} for g in rep["groups"]],
              [("group", "GROUP"), ("parent", "PARENT"), ("instance_type", "INSTANCE TYPE"),
               ("quota_hours", "QUOTA ACC-H"), ("accelerator_hours", "USED ACC-H"),
               ("borrowed_hours", "BORROWED BY ITS TEAMS"), ("utilization", "UTILISATION"), ("teams", "TEAMS")])
    if rep.get("budgets"):
        print()
        print("Budgets (current period)")
        table([{**b, "used": f"{b['used_hours']:.1f} of {b['accelerator_hours']:g} h",
                "pct": f"{round(b['used_ratio'] * 100)} %", "cap": "hard" if b["hard_cap"] else "-"}
               for b in rep["budgets"]],
              [("team", "TEAM"), ("instance_type", "INSTANCE TYPE"), ("period", "PERIOD"), ("used", "USED"),
               ("pct", "%"), ("cap", "CAP"), ("state", "STATE")])
    print()
    print("Tasks")
    table(rep["tasks"], TASK_COLS)
    return 0
