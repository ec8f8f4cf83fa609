"""``fairpod explain``: why team X gets more than team Y, why a job waits (weights, quotas, use and dominant share at
each level of the tree of groups; who gets the next idle capacity and by which rule)."""

from __future__ import annotations

import argparse
from typing import Any

from fairpod.cli.client import Client
from fairpod.cli.output import add_output, emit, table

LEVEL_COLS = [("at", "LEVEL"), ("name", "NAME"), ("weight", "WEIGHT"), ("quota", "QUOTA"), ("in_use", "IN USE"),
              ("borrowed", "BORROWED"), ("share", "SHARE"), ("siblings", "AGAINST")]
NEXT_COLS = [("n", "#"), ("team", "TEAM"), ("job", "JOB"), ("accelerators", "ACC"), ("within", "WITHIN QUOTA"),
             ("share", "SHARE AFTER"), ("rule", "WHY IN THIS PLACE"), ("why_not", "HELD BACK BY")]


def register(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser("explain", help="why a team gets more than another, why a job waits",
                       description="The figures behind the engine's choices: each team's weight, quota, use and "
                       "weighted dominant share at each level of the tree of groups, and who gets the next idle "
                       "capacity and by which rule.").add_subparsers(dest="explain_cmd", metavar="WHAT",
                                                                       required=True)
    p = e.add_parser("teams", help="why team X gets more (or less) than team Y",
                     epilog="example: fairpod explain teams nlp web --instance-type ml.p5.48xlarge")
    p.add_argument("team", nargs=2, metavar="TEAM")
    p.add_argument("--instance-type", help="the instance type (default: the one the teams use)")
    add_output(p)
    p.set_defaults(func=explain_teams)
    p = e.add_parser("job", help="why a job waits (or runs where it does)")
    p.add_argument("job", help="job name or id")
    add_output(p)
    p.set_defaults(func=explain_job)


def _share(v: Any) -> str:
    if v is None:
        return "infinite"
    if isinstance(v, list):
        return " / ".join(_share(x) for x in v)
    return f"{v:.4f}"


def _levels(levels: list[dict[str, Any]]) -> None:
    table([{**lv, "at": lv["level"], "share": _share(lv["share"]), "siblings": ", ".join(lv["siblings"]) or "-"}
           for lv in levels], LEVEL_COLS)


def _next(offers: list[dict[str, Any]]) -> None:
    print()
    print("Who gets the next idle capacity (the engine offers in this order; the first that fits gets it):")
    table([{**o, "n": i + 1, "job": o["job"] or "-", "within": "yes" if o["within_quota"] else "no",
            "share": _share(o["share_after"]), "why_not": o["why_not"] or "-"} for i, o in enumerate(offers)],
          NEXT_COLS)


def explain_teams(a: argparse.Namespace) -> int:
    params: dict[str, Any] = {"team": list(a.team)}
    if a.instance_type:
        params["instance_type"] = a.instance_type
    r = Client().get("/explain/teams", **params)
    if emit(r, a.output):
        return 0
    for line in r["explanation"]:
        print(line)
    for name, levels in r["teams"].items():
        print()
        print(f"team {name} on {r['instance_type']}, from the top of the tree down:")
        _levels(levels)
    if r["next_idle"]:
        _next(r["next_idle"])
    else:
        print()
        print(f"No team waits for {r['instance_type']}: idle capacity stays idle until one does.")
    return 0


def explain_job(a: argparse.Namespace) -> int:
    r = Client().get(f"/explain/jobs/{a.job}")
    if emit(r, a.output):
        return 0
    print(f"job {r['job']} (team {r['team']}): {r['state']} — {r['reason'] or '-'}")
    if r.get("queue_position") is not None:
        print(f"place in team {r['team']}'s queue: {r['queue_position']}"
              + ("" if r.get("team_head") else " (jobs of its team ahead of it are offered first)"))
    check = r.get("team_check")
    if check and check["why_not"]:
        print(f"held back by its team's check: {check['why_not']}")
    if r.get("levels"):
        print()
        print(f"team {r['team']} on {r['instance_type']}, from the top of the tree down:")
        _levels(r["levels"])
    if r.get("next_idle"):
        _next(r["next_idle"])
    return 0
