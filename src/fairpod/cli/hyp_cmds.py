"""``fairpod hyp …``: the SageMaker HyperPod CLI v3 (``hyp``) commands for PyTorch jobs, where they mean the
same in fairpod.

    fairpod hyp create hyp-pytorch-job --job-name NAME --queue-name hyperpod-ns-TEAM-localqueue
        [--namespace hyperpod-ns-TEAM] [--priority CLASS-priority] [--max-retry N] [--instance-type T]
        [--node-count N] [--accelerators N] [--vcpu N] [--memory GIB] [--tasks-per-node N|auto]
        [--deep-health-check-passed-nodes-only [true|false]] [--environment JSON] [--label-selector JSON]
        [--required-topology LABEL | --preferred-topology LABEL]
        [--accelerator-partition-type mig-1g.10gb --accelerator-partition-count N] [--image IMAGE [--pull-policy P] [--on-host]] [--command '[python, train.py]'] [--args '[--epochs, 3]']
    fairpod hyp list hyp-pytorch-job [-n hyperpod-ns-TEAM]
    fairpod hyp describe|delete|list-pods hyp-pytorch-job --job-name NAME [-n hyperpod-ns-TEAM]
    fairpod hyp get-logs hyp-pytorch-job --job-name NAME --pod-name NAME-pod-I [-n hyperpod-ns-TEAM]

The team is the namespace ``hyperpod-ns-<team>``; a job's pods are its replicas, ``<job>-pod-<i>``. ``create``'s
flags are read in ``fairpod.cli.hyp_create``; ``hyp-space`` is ``fairpod.cli.hyp_space`` (docs/spaces.md).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, NoReturn

from fairpod.cli import hyp_space
from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.hyp_create import create, create_flags, team_of
from fairpod.cli.output import ago, emit_json, plural, table
from fairpod.formats import hyperpod

KIND = "hyp-pytorch-job"
POD_RE = re.compile(r"^(?P<job>.+)-pod-(?P<i>\d+)$")


class HypParser(argparse.ArgumentParser):
    """Errors as one line (``fairpod: error: hyp create hyp-pytorch-job: …``), not usage and a traceback."""

    def error(self, message: str) -> NoReturn:
        if message.endswith("required: KIND"):
            message += f" (the kinds fairpod knows: {KIND})"
        print(f"fairpod: error: {self.prog.removeprefix('fairpod ')}: {message}", file=sys.stderr)
        raise SystemExit(2)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        ns, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)} (see fairpod {self.prog.removeprefix('fairpod ')}"
                       " -h)")
        return ns, extra


def _ns(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namespace", help="hyperpod-ns-<team> (default: every team you can see)")


def register(sub: argparse._SubParsersAction) -> None:
    hyp = sub.add_parser("hyp", help="HyperPod CLI (hyp) commands for PyTorch jobs",
                         description="The SageMaker HyperPod CLI's PyTorch job commands: create, list, describe, "
                         "delete, list-pods, get-logs (see docs/kubernetes.md).")
    verbs = hyp.add_subparsers(dest="hyp_verb", metavar="VERB", parser_class=HypParser)
    specs = [
        ("create", "submit a PyTorch job", create),
        ("list", "list PyTorch jobs", list_jobs),
        ("describe", "show a PyTorch job", describe),
        ("delete", "stop a PyTorch job (fairpod keeps its record as Cancelled)", delete),
        ("list-pods", "list a job's pods (its replicas)", list_pods),
        ("get-logs", "print the output of one pod of a job", get_logs),
    ]
    for verb, hlp, func in specs:
        vp = verbs.add_parser(verb, help=hlp, description=hlp)
        kinds = vp.add_subparsers(dest="hyp_kind", metavar="KIND", parser_class=HypParser, required=True)
        p = kinds.add_parser(KIND, help=hlp, description=hlp)
        _ns(p)
        if verb == "create":
            create_flags(p)
        elif verb != "list":
            p.add_argument("--job-name", required=True)
        if verb == "get-logs":
            p.add_argument("--pod-name", required=True, help="<job>-pod-<i> (see hyp list-pods)")
        if verb in ("list", "describe", "list-pods"):
            p.add_argument("-o", "--output", choices=["table", "json"], default="table")
        p.set_defaults(func=func)
    hyp_space.register(verbs)  # hyp-space (docs/spaces.md)
    hyp.set_defaults(func=lambda a: _usage(hyp))


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def _params(a: argparse.Namespace) -> dict[str, Any]:
    team = team_of(a.namespace)
    return {"team": team} if team else {}


def list_jobs(a: argparse.Namespace) -> int:
    res = Client().get("/jobs", team=_params(a).get("team"), limit=0)
    jobs = res["jobs"]
    if a.output == "json":
        emit_json(jobs)
        return 0
    if not jobs:
        print("No jobs found.")
        return 0
    rows = [{"name": j["name"], "namespace": hyperpod.namespace(j["team"]), "status": j["state"],
             "age": ago(j["submit_time"])} for j in jobs]
    table(rows, [("name", "NAME"), ("namespace", "NAMESPACE"), ("status", "STATUS"), ("age", "AGE")])
    return 0


def describe(a: argparse.Namespace) -> int:
    j = Client().get(f"/jobs/{a.job_name}", **_params(a))
    if a.output == "json":
        emit_json(j)
        return 0
    labels = {"kueue.x-k8s.io/queue-name": hyperpod.local_queue(j["team"])}
    if j["priority"]:
        labels["kueue.x-k8s.io/priority-class"] = hyperpod.priority_class(j["priority"])
    cmd = j.get("command") or []
    if cmd[1:4] == ["-m", "fairpod.formats.kube.pod", "--"]:
        cmd = cmd[4:]
    lines = [
        ("Name", j["name"]), ("Namespace", hyperpod.namespace(j["team"])), ("Labels", labels),
        ("Status", f"{j['state']} — {j['reason']}"), ("Instance type", j["instance_type"]),
        ("Replicas", f"{j['nodes']} x {plural(j['accelerators_per_node'], 'accelerator')}"),
        ("Pods", ", ".join(f"{j['name']}-pod-{i} on {n}" for i, n in enumerate(j["placement"])) or "-"),
        ("Max retry", f"{j['max_retry']} (restarts so far: {j['restarts']})" if j["auto_resume"] else "0"),
        ("Command", " ".join(cmd)),
    ]
    print("\nJob Details:")
    print("=" * 80)
    for k, v in lines:
        print(f"{k + ':':16}{v}")
    print("\nEvents:")
    for e in j["events"][-20:]:
        print(f"  {ago(e['ts']):>4} ago  {e['kind']:<16} {e['message']}")
    return 0


def delete(a: argparse.Namespace) -> int:
    j = Client().post(f"/jobs/{a.job_name}/cancel", **_params(a))
    print(f"hyp-pytorch-job {j['name']} deleted from namespace {hyperpod.namespace(j['team'])}: fairpod job {j['id']} is "
          f"{j['state']} — {j['reason']}")
    return 0


def list_pods(a: argparse.Namespace) -> int:
    j = Client().get(f"/jobs/{a.job_name}", **_params(a))
    res = Client().get(f"/jobs/{j['id']}/replicas")
    ns = hyperpod.namespace(j["team"])
    pods = [{"pod": f"{j['name']}-pod-{r['replica']}", "namespace": ns, **r} for r in res["replicas"]]
    if a.output == "json":
        emit_json(pods)
        return 0
    if not pods:
        print(f"\nNo pods found for job: {j['name']} ({j['state']})")
        return 0
    print(f"\nPods for job: {j['name']}\n")
    table(pods, [("pod", "POD NAME"), ("namespace", "NAMESPACE"), ("state", "STATUS"), ("node", "NODE")])
    return 0


def get_logs(a: argparse.Namespace) -> int:
    m = POD_RE.match(a.pod_name)
    if not m or m.group("job") != a.job_name:
        raise CliError(f"--pod-name {a.pod_name!r} is not a pod of job {a.job_name}: its pods are "
                       f"{a.job_name}-pod-<i> (see fairpod hyp list-pods {KIND} --job-name {a.job_name})")
    j = Client().get(f"/jobs/{a.job_name}", **_params(a))
    print(f"Listing logs for pod: {a.pod_name}", flush=True)
    out = sys.stdout.buffer
    for chunk in Client().stream(f"/jobs/{j['id']}/logs", replica=int(m.group("i"))):
        out.write(chunk)
        out.flush()
    return 0
