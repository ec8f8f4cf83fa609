"""``fairpod apply --dry-run``, ``fairpod policy history`` and ``fairpod policy rollback N``: policy as code."""

from __future__ import annotations

import argparse
import time

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.output import add_output, emit, table

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any


def register_policy(pol: argparse._SubParsersAction) -> None:
    """Add ``history`` and ``rollback`` to the ``policy`` command."""
    p = pol.add_parser("history", help="every applied spec version: who, when, how",
                       description="List the versions of the cluster spec (policy, teams, instance groups), newest "
                       "first; 'fairpod policy history N' shows version N and its diff to the spec in force.")
    p.add_argument("version", nargs="?", type=int, metavar="N", help="show this version and its diff")
    p.add_argument("--limit", type=int, default=50, help="versions to list (default %(default)s)")
    add_output(p)
    p.set_defaults(func=history)
    p = pol.add_parser("rollback", help="apply an earlier spec version again (admin)",
                       description="Apply spec version N again, as a new version (refused while a team it drops "
                       "still has unfinished jobs). Use 'fairpod policy history' to find N.")
    p.add_argument("version", type=int, metavar="N")
    add_output(p)
    p.set_defaults(func=rollback)


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def history(a: argparse.Namespace) -> int:
    c = Client()
    if a.version is not None:
        if a.version < 1:
            raise CliError("N is a spec version: 1 or more (see 'fairpod policy history')")
        v = c.get(f"/spec/history/{a.version}")
        if emit(v, a.output):
            return 0
        print(f"version {v['version']}: {v['action']} by {v['actor']} at {_when(v['applied_at'])}")
        print(v["diff_to_current"] or "(the same as the spec in force)", end="" if v["diff_to_current"] else "\n")
        return 0
    if a.limit < 1:
        raise CliError("--limit must be 1 or more")
    h = c.get("/spec/history", limit=a.limit)
    if emit(h, a.output):
        return 0
    rows = [{"version": f"{v['version']}{' *' if v['current'] else ''}", "at": _when(v["applied_at"]),
             "actor": v["actor"], "action": v["action"]} for v in h["versions"]]
    table(rows, [("version", "VERSION"), ("at", "APPLIED"), ("actor", "BY"), ("action", "HOW")])
    print("(* in force)")
    return 0


def rollback(a: argparse.Namespace) -> int:
    if a.version < 1:
        raise CliError("N is a spec version: 1 or more (see 'fairpod policy history')")
    res = Client().post("/spec/rollback", {"version": a.version})
    if emit(res, a.output):
        pass
    elif res["changed"]:
        print(f"rolled back to the spec of version {a.version}; it is now version {res['version']}")
    else:
        print(f"unchanged: version {a.version} is the spec in force")
    return 0


def dry_run(a: argparse.Namespace, data: Any) -> int:
    """``fairpod apply --dry-run``: the diff and what the engine would do, changing nothing."""
    res = Client().post("/spec/dry-run", data)
    if emit(res, a.output):
        return 0
    if not res["changed"]:
        print(f"{a.file}: unchanged (already applied)")
        return 0
    print(res["diff"], end="")
    for p in res["problems"]:
        print(f"problem: {p}")
    pre, start = res["would_preempt"], res["would_start"]
    if not pre and not start:
        print("the engine would preempt and start nothing now")
    for j in pre:
        print(f"would preempt {j['team']}/{j['name']} ({j['kind']}): {j['reason']}")
    for j in start:
        print(f"would start {j['team']}/{j['name']} on {', '.join(j['nodes'])}")
    print("dry run: nothing was changed")
    return 0
