"""Services (inference endpoints): start-service, get-service, list-services, delete-service."""

from __future__ import annotations

import argparse
import os
import time

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.jobbody import (
    _kv,
    _team_flags,
    finish,
    job_flag,
    only_team,
    seconds,
)
from fairpod.cli.output import add_output, emit, table
from fairpod.model.jobflags import service_flags

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SERVICE_FLAGS = service_flags()  # the API's fields in start-service's words (for the server's error messages)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "start-service", help="start a service: replicas that run until deleted, behind one address",
        description="Start a service (an inference endpoint): MIN-REPLICAS..MAX-REPLICAS replicas of COMMAND, each "
        "on its own node, restarted when they exit, until 'fairpod delete-service'. Each replica listens on $PORT; "
        "fairpod probes it (--readiness-path, --readiness-command, else a TCP connect) and publishes the ready ones "
        "behind the service's address ('fairpod get-service NAME'). Replicas above the minimum grow into idle and "
        "borrowed capacity and are the first to go when it is reclaimed, one at a time: each leaves the endpoint list, "
        "then gets SIGTERM --drain-seconds later.",
        epilog="example:\n  fairpod start-service --name chat --team john --min-replicas 1 --max-replicas 4 "
        "--accelerators 1 --readiness-path /healthz -- python serve.py --port '$PORT'",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    job_flag(p, "name", words=SERVICE_FLAGS, required=True, help="service name (lower-case letters, digits, '-')")
    _team_flags(p)
    job_flag(p, "priority", words=SERVICE_FLAGS, help="priority class (e.g. inference; 'fairpod policy show')")
    job_flag(p, "instance_type", words=SERVICE_FLAGS, help="instance type (default: the cluster's only one)")
    job_flag(p, "min_nodes", words=SERVICE_FLAGS, default=1, metavar="N",
                   help="replicas it starts with and never shrinks below (default 1)")
    job_flag(p, "max_nodes", words=SERVICE_FLAGS, metavar="M",
                   help="it grows into idle capacity up to M replicas (default --min-replicas)")
    job_flag(p, "accelerators", words=SERVICE_FLAGS,
                   help="whole accelerators per replica (default: the whole node)")
    job_flag(p, "vcpu", words=SERVICE_FLAGS, metavar="N", help="vCPUs per replica (default: by ratio)")
    job_flag(p, "memory_gib", words=SERVICE_FLAGS, metavar="SIZE", help="memory per replica, e.g. 16Gi")
    check = p.add_mutually_exclusive_group()
    job_flag(check, "service.readiness_path", words=SERVICE_FLAGS, metavar="PATH",
                       help="HTTP path: a replica is ready while GET http://127.0.0.1:$PORT/PATH answers 2xx/3xx")
    job_flag(check, "service.readiness_command", words=SERVICE_FLAGS, metavar="CMD",
                       help="shell command run inside each replica's sandbox (as its user, with its environment "
                       "and $PORT) every second, at most 5 s: ready while it exits 0")
    job_flag(p, "service.drain_seconds", words=SERVICE_FLAGS, type=seconds(3600), metavar="SECONDS",
                   help="a replica that goes leaves the endpoint list and gets SIGTERM this long after (default 5)")
    job_flag(p, "termination_grace_seconds", words=SERVICE_FLAGS, help="seconds from SIGTERM to SIGKILL (default 30)")
    job_flag(p, "service.restart_backoff_seconds", words=SERVICE_FLAGS, type=seconds(3600), metavar="SECONDS",
                   help="a replica that exits starts again this long after, twice as long after each further exit "
                   "in a row (default 1; 0: at once)")
    job_flag(p, "service.restart_backoff_max_seconds", words=SERVICE_FLAGS, type=seconds(86400), metavar="SECONDS",
                   help="the longest a replica's restart waits (default 60)")
    job_flag(p, "service.restart_reset_seconds", words=SERVICE_FLAGS, type=seconds(86400), metavar="SECONDS",
                   help="a replica ready this long in a row starts its backoff over (default 60)")
    job_flag(p, "env", words=SERVICE_FLAGS, action="append", default=[], metavar="K=V", help="environment variable (repeatable)")
    job_flag(p, "workdir", words=SERVICE_FLAGS, help="working directory of the replicas (default: this directory)")
    add_output(p)
    p.set_defaults(func=start_service, job_command=None)

    p = sub.add_parser("get-service", help="a service's address and ready endpoints",
                       description="Show a service: its address (send requests there), its replicas and the "
                       "endpoints that take requests now.")
    p.add_argument("service", help="service name or id")
    _team_flags(p)
    add_output(p)
    p.set_defaults(func=get_service)

    p = sub.add_parser("list-services", help="list running and waiting services",
                       description="List the services of your teams that have not been deleted.")
    _team_flags(p)
    add_output(p)
    p.set_defaults(func=list_services)

    p = sub.add_parser("delete-service", help="stop a service for good",
                       description="Stop every replica of a service (SIGTERM, then SIGKILL after its grace period); "
                       "it ends Cancelled.")
    p.add_argument("service", help="service name or id")
    _team_flags(p)
    add_output(p)
    p.set_defaults(func=delete_service)


def service_body(a: argparse.Namespace) -> dict[str, Any]:
    if not a.job_command:
        raise CliError("give the service's command after --, e.g. fairpod start-service --name chat -- python "
                       "serve.py")
    lo, hi = a.min_replicas, a.max_replicas if a.max_replicas is not None else a.min_replicas
    if hi < lo:
        raise CliError(f"--max-replicas {hi} is less than --min-replicas {lo}")
    svc: dict[str, Any] = {}
    if a.readiness_path is not None:
        if not a.readiness_path.startswith("/"):
            raise CliError(f"--readiness-path {a.readiness_path!r}: give a path that starts with /, e.g. /healthz")
        svc["readiness_path"] = a.readiness_path
    if a.readiness_command is not None:
        svc["readiness_command"] = ["sh", "-c", a.readiness_command]
    for field in ("drain_seconds", "restart_backoff_seconds", "restart_backoff_max_seconds",
                  "restart_reset_seconds"):
        if getattr(a, field) is not None:
            svc[field] = getattr(a, field)
    body: dict[str, Any] = {"name": a.name, "team": a.team or only_team(), "nodes": lo, "command": a.job_command,
                            "service": svc, "workdir": a.workdir or os.getcwd()}
    if hi > lo:
        body["max_nodes"] = hi
    for field, value in (("priority", a.priority), ("instance_type", a.instance_type),
                         ("accelerators", a.accelerators), ("vcpu", a.vcpu), ("memory_gib", a.memory),
                         ("termination_grace_seconds", a.grace_seconds)):
        if value is not None:
            body[field] = value
    if a.env:
        body["env"] = _kv(a.env)
    return finish(body)


def start_service(a: argparse.Namespace) -> int:
    try:
        job = Client(fields=SERVICE_FLAGS).submit(service_body(a))
    except CliError as e:  # the server's checks name the job's fields: here they are start-service's flags
        msg = str(e).replace("max_nodes", "--max-replicas").replace("min_nodes", "--min-replicas")
        raise CliError(msg, e.code, e.status) from None
    if not emit(job, a.output):
        print(f"service {job['name']} (id {job['id']}) started for team {job['team']}: {job['state']} — "
              f"{job['reason']}; 'fairpod get-service {job['name']}' shows its address")
    return 0


def _params(a: argparse.Namespace) -> dict[str, Any]:
    return {"team": a.team} if a.team else {}


def get_service(a: argparse.Namespace) -> int:
    s = Client().get(f"/services/{a.service}", **_params(a))
    if emit(s, a.output):
        return 0
    print(f"service:    {s['name']} (id {s['id']}, team {s['team']}) {s['state']}")
    print(f"address:    {s['address'] or '(none yet: not running)'}")
    print(f"replicas:   {s['replicas']} running, {s['ready_replicas']} ready (min {s['min_replicas']}, "
          f"max {s['max_replicas']})")
    print(f"readiness:  {s['readiness']}; drain {s['drain_seconds']:g} s")
    for e in s["endpoints"]:
        print(f"  replica {e['rank']}  {e['address']}")
    if s["draining"]:
        print(f"draining:   replicas {', '.join(str(r) for r in s['draining'])}")
    now = time.time()
    for c in s.get("restarts", []):
        due = c["next_start_at"]
        when = (f"starts again at {time.strftime('%H:%M:%S', time.localtime(due))} (in {due - now:.0f} s)"
                if due > now else "started again")
        print(f"restarts:   replica {c['rank']}: {c['exits_in_a_row']} exits in a row, {when}")
    return 0


def list_services(a: argparse.Namespace) -> int:
    res = Client().get("/services", **_params(a))
    if not emit(res, a.output):
        rows = [{**s, "size": f"{s['replicas']} ({s['min_replicas']}-{s['max_replicas']})"} for s in res["services"]]
        table(rows, [("name", "NAME"), ("team", "TEAM"), ("state", "STATE"), ("size", "REPLICAS"),
                     ("ready_replicas", "READY"), ("address", "ADDRESS")])
    return 0


def delete_service(a: argparse.Namespace) -> int:
    s = Client().get(f"/services/{a.service}", **_params(a))  # refuses what is not a service
    j = Client().post(f"/jobs/{s['id']}/cancel")
    if not emit(j, a.output):
        print(f"service {j['name']}: {j['state']} — {j['reason']}")
    return 0
