"""``fairpod set-priority JOB CLASS``: change a pending or running job's priority class after submission; it keeps
its place among the jobs of its new priority, and the engine decides again in its next cycle."""

from __future__ import annotations

import argparse

from fairpod.cli.output import add_output, emit_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("set-priority", help="change a waiting or running job's priority class",
                       description="Change a pending or running job's priority class (one of the policy's, or "
                       "'none' for no class, the lowest). The job keeps its place in its team's queue among jobs of "
                       "its new priority (no cancel and resubmit); the engine decides again in its next cycle, so a "
                       "raised job may start in place of lower-priority jobs of its team, and a lowered running job "
                       "may be preempted. The event JobPriorityChanged records who changed it.")
    p.add_argument("job", metavar="NAME", help="job name or id")
    p.add_argument("priority_class", metavar="CLASS", help="a priority class of the policy, or none")
    p.add_argument("--team", help="the job's team, where its name is not unique")
    add_output(p)
    p.set_defaults(func=set_priority)


def set_priority(a: argparse.Namespace) -> int:
    from fairpod.cli.client import Client

    c = Client(fields={"priority_class": "CLASS"})
    cls = None if a.priority_class == "none" else a.priority_class
    j = c.post(f"/jobs/{a.job}/priority", {"priority_class": cls}, **({"team": a.team} if a.team else {}))
    if a.output == "json":
        emit_json(j)
    else:
        print(f"job {j['name']}: priority class {cls or '(none)'}")
    return 0
