"""Data scientists' commands: start-job, list-jobs, get-job, cancel-job, list-pods, get-logs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.output import add_output, ago, emit_json, table

STATES = ["Pending", "Running", "Preempted", "Succeeded", "Failed", "Cancelled"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "start-job", help="submit a job", description="Submit a job: NODE-COUNT replicas of COMMAND, each on its "
        "own node of INSTANCE-TYPE with ACCELERATORS accelerators (default: the whole node). Flags override the "
        "fields of --config-file.", epilog="example: fairpod start-job --name train --team john --node-count 2 "
        "--auto-resume --max-retry 3 -- python train.py")
    p.add_argument("--name", help="job name (lower-case letters, digits, '-')")
    p.add_argument("--team", help="the team the job runs for")
    p.add_argument("--priority", help="priority class (see 'fairpod policy show')")
    p.add_argument("--instance-type", help="instance type (default: the cluster's only one)")
    p.add_argument("--node-count", type=int, help="replicas, one per node (default 1)")
    p.add_argument("--accelerators", type=float, help="accelerators per node (default the whole node)")
    p.add_argument("--auto-resume", action="store_true", default=None, help="restart the job when a replica fails")
    p.add_argument("--max-retry", type=int, help="restarts allowed with --auto-resume")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="environment variable (repeatable)")
    p.add_argument("--workdir", help="working directory of the replicas")
    p.add_argument("--grace-seconds", type=float, help="SIGTERM to SIGKILL on preemption (default 30)")
    p.add_argument("--min-runtime", type=float, help="seconds during which the job is never preempted")
    p.add_argument("--deep-health-check-passed-nodes-only", action="store_true", default=None)
    p.add_argument("--config-file", help="job spec as YAML (name, team, command, nodes, …)")
    add_output(p)
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS…]")
    p.set_defaults(func=start_job)

    p = sub.add_parser("list-jobs", help="list jobs of your teams", description="List jobs, newest last.")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--team")
    g.add_argument("--all-teams", action="store_true", help="every team you may see (the default)")
    p.add_argument("--status", choices=STATES, action="append", help="filter by state (repeatable)")
    p.add_argument("--limit", type=int, default=500, help="show the newest N jobs (default 500; 0: all)")
    add_output(p)
    p.set_defaults(func=list_jobs)

    for name, func, hlp in [("get-job", get_job, "show a job: state, reason, queue position, borrowing, events"),
                            ("cancel-job", cancel_job, "cancel a job (running replicas get SIGTERM)"),
                            ("list-pods", list_pods, "list a job's replicas: node, accelerators, state")]:
        p = sub.add_parser(name, help=hlp, description=hlp)
        p.add_argument("job", metavar="NAME", help="job name or id")
        p.add_argument("--team", help="the job's team, when several of your teams have a job of that name")
        add_output(p)
        p.set_defaults(func=func)

    p = sub.add_parser("get-logs", help="print a replica's output", description="Print the output of one replica "
                       "of a job's latest attempt; --follow keeps printing until the job ends.")
    p.add_argument("job", metavar="NAME")
    p.add_argument("--team")
    p.add_argument("--replica", type=int, default=0)
    p.add_argument("--follow", "-f", action="store_true")
    p.set_defaults(func=get_logs)


def _kv(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise CliError(f"--env wants K=V, got {it!r}")
        out[k] = v
    return out


def start_job(a: argparse.Namespace) -> int:
    body: dict[str, Any] = {}
    if a.config_file:
        try:
            data = yaml.safe_load(Path(a.config_file).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise CliError(f"cannot read {a.config_file}: {e}") from None
        if not isinstance(data, dict):
            raise CliError(f"{a.config_file}: expected a mapping of job fields")
        body.update(data)
    flags = {"name": a.name, "team": a.team, "priority": a.priority, "instance_type": a.instance_type,
             "nodes": a.node_count, "accelerators": a.accelerators, "auto_resume": a.auto_resume,
             "max_retry": a.max_retry, "workdir": a.workdir, "termination_grace_seconds": a.grace_seconds,
             "min_runtime_seconds": a.min_runtime,
             "deep_health_check_passed_nodes_only": a.deep_health_check_passed_nodes_only}
    body.update({k: v for k, v in flags.items() if v is not None})
    if a.env:
        body["env"] = {**body.get("env", {}), **_kv(a.env)}
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if cmd:
        body["command"] = cmd
    for need in ("name", "team"):
        if not body.get(need):
            raise CliError(f"--{need} is required (or set it in --config-file)")
    if not body.get("command"):
        raise CliError("give the command after --, e.g. fairpod start-job --name x --team t -- python train.py")
    if body.get("workdir") is None:
        body["workdir"] = str(Path.cwd())
    job = Client().submit(body)
    if a.output == "json":
        emit_json(job)
    else:
        print(f"job {job['name']} (id {job['id']}) submitted for team {job['team']}: {job['state']} — {job['reason']}")
    return 0


def list_jobs(a: argparse.Namespace) -> int:
    res = Client().get("/jobs", team=a.team, state=a.status, limit=a.limit)
    if a.output == "json":
        emit_json(res["jobs"])
        return 0
    rows = [{**j, "age": ago(j["submit_time"]), "nodes_acc": f"{j['nodes']}x{j['accelerators_per_node']}"}
            for j in res["jobs"]]
    table(rows, [("id", "ID"), ("name", "NAME"), ("team", "TEAM"), ("state", "STATE"), ("priority", "PRIORITY"),
                 ("nodes_acc", "NODES"), ("restarts", "RESTARTS"), ("age", "AGE"), ("reason", "REASON")])
    if res.get("truncated"):
        print(f"(the newest {res['count']} of {res['total']} jobs; --limit 0 shows all)", file=sys.stderr)
    return 0


def _ref(a: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    return a.job, ({"team": a.team} if a.team else {})


def get_job(a: argparse.Namespace) -> int:
    ref, params = _ref(a)
    j = Client().get(f"/jobs/{ref}", **params)
    if a.output == "json":
        emit_json(j)
        return 0
    fields = [("Name", j["name"]), ("Id", j["id"]), ("Team", j["team"]), ("State", j["state"]),
              ("Reason", j["reason"]), ("Priority", j["priority"] or "(none: lowest)"),
              ("Queue position", j["queue_position"]), ("Instance type", j["instance_type"]),
              ("Nodes", f"{j['nodes']} x {j['accelerators_per_node']} accelerators"),
              ("Placement", ", ".join(j["placement"]) or "-"),
              ("Borrowed from", ", ".join(f"{k} ({v})" for k, v in j["borrowed_from"].items()) or "-"),
              ("Restarts", f"{j['restarts']} of {j['max_retry']}" + (" (auto-resume)" if j["auto_resume"] else "")),
              ("Preemptions", j["preemptions"]), ("Checkpoint", _checkpoint(j["checkpoint"])),
              ("Command", " ".join(j["command"]))]
    for k, v in fields:
        print(f"{k + ':':16} {v if v is not None else '-'}")
    print("Events:")
    for e in j["events"][-20:]:
        print(f"  {ago(e['ts']):>4} ago  {e['kind']:<16} {e['message']}")
    return 0


def _checkpoint(c: dict[str, Any]) -> str:
    """The last reported checkpoint: path (step N, T ago), as fairpod.sdk.report_progress sent it."""
    if not c.get("path") and c.get("step") is None:
        return "-"
    extra = [f"step {c['step']}"] if c.get("step") is not None else []
    if c.get("at"):
        extra.append(f"{ago(c['at'])} ago")
    return f"{c.get('path') or '(no file)'} ({', '.join(extra)})" if extra else c["path"]


def cancel_job(a: argparse.Namespace) -> int:
    ref, params = _ref(a)
    j = Client().post(f"/jobs/{ref}/cancel", **params)
    if a.output == "json":
        emit_json(j)
    else:
        print(f"job {j['name']}: {j['state']} — {j['reason']}")
    return 0


def list_pods(a: argparse.Namespace) -> int:
    ref, params = _ref(a)
    res = Client().get(f"/jobs/{ref}/replicas", **params)
    if a.output == "json":
        emit_json(res)
        return 0
    table(res["replicas"], [("replica", "REPLICA"), ("node", "NODE"), ("accelerators", "ACCELERATORS"),
                            ("state", "STATE"), ("exit", "EXIT")])
    return 0


def get_logs(a: argparse.Namespace) -> int:
    params: dict[str, Any] = {"replica": a.replica, "follow": str(a.follow).lower()}
    if a.team:
        params["team"] = a.team
    out = sys.stdout.buffer
    for chunk in Client().stream(f"/jobs/{a.job}/logs", **params):
        out.write(chunk)
        out.flush()
    return 0
