"""The ``hyperpod`` and ``hyp`` executables: the SageMaker HyperPod CLI's commands, spelled as its users type
them, on fairpod.

    hyperpod start-job --job-name NAME [--namespace hyperpod-ns-TEAM] [--instance-type T] [--node-count N]
        [--entry-script train.py] [--script-args '--epochs 3'] [--priority CLASS-priority] [--queue-name Q]
        [--auto-resume true --max-retry N] [--image IMAGE [--pull-policy P] [--on-host]] [--config-file config.yaml]
    hyperpod get-job --job-name NAME [--namespace NS]
    hyperpod list-jobs [--namespace NS | --all-namespaces]
    hyperpod cancel-job --job-name NAME [--namespace NS]
    hyperpod list-pods --job-name NAME [--namespace NS]
    hyperpod get-log --job-name NAME --pod NAME-pod-I [--namespace NS]

``hyp …`` is ``fairpod hyp …`` (the HyperPod CLI v3's ``hyp create hyp-pytorch-job`` and the rest).

Reads answer in JSON, as the HyperPod CLI does. ``--config-file`` takes the HyperPod CLI's own YAML (its
template's every key: fairpod.cli.hyp_config); a field whose meaning fairpod cannot give is refused by name,
every such field of the file in one answer, never dropped. The entry script runs as ``python SCRIPT ARGS`` on each node with the job's replicas' environment
(``fairpod.formats.kube.pod``: the ``PET_*`` variables torchrun reads).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from fairpod.cli.errors import CliError
from fairpod.formats import hyperpod
from fairpod.model.jobflags import JOB_FLAGS

ENTRY = "hyperpod"
# the job fields hyperpod start-job sets by a flag (start-job's words from the one table, fairpod.model.jobflags,
# --job-name for --name; the values typed by fairpod.cli.jobbody.TYPES); --namespace/--queue-name (the team), the
# script and the image are its own
FLAGS = {**{f: JOB_FLAGS[f] for f in ("instance_type", "nodes", "priority", "auto_resume", "max_retry",
                                      "deep_health_check_passed_nodes_only")}, "name": "--job-name"}
class Parser(argparse.ArgumentParser):
    """One-line errors: ``hyperpod start-job: error: …``."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}; see '{self.prog} --help'", file=sys.stderr)
        raise SystemExit(2)


def _ns_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--namespace", "-n", metavar="NAMESPACE", help="hyperpod-ns-<team> (default: your only team)")


def build_parser() -> Parser:
    parser = Parser(prog=ENTRY, description="The SageMaker HyperPod CLI's job commands on fairpod (see "
                    "docs/kubernetes.md); 'fairpod --help' has everything else.")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND", parser_class=Parser)
    p = sub.add_parser("start-job", help="submit a training job",
                       description="Submit a training job: --entry-script runs on --node-count nodes of "
                       "--instance-type. --config-file takes the HyperPod CLI's YAML; flags win over it.")
    p.add_argument(FLAGS["name"], "--name", dest="job_name", metavar="NAME")
    _ns_flags(p)
    p.add_argument("--queue-name", metavar="QUEUE", help="hyperpod-ns-<team>-localqueue")
    p.add_argument(FLAGS["instance_type"])
    p.add_argument(FLAGS["nodes"], metavar="N")
    p.add_argument("--tasks-per-node", metavar="N", help="1 (one replica per node), as fairpod runs them")
    p.add_argument("--entry-script", metavar="SCRIPT", help="the Python script each replica runs")
    p.add_argument("--script-args", metavar="ARGS", help="its arguments, one string ('--epochs 3')")
    p.add_argument(FLAGS["priority"], metavar="CLASS", help="priority class (HyperPod's <class>-priority works)")
    p.add_argument(FLAGS["auto_resume"], metavar="true|false")
    p.add_argument(FLAGS["max_retry"], metavar="N")
    p.add_argument(FLAGS["deep_health_check_passed_nodes_only"], metavar="true|false")
    p.add_argument("--image", help="the container image the script runs in (podman on the node; "
                   "docs/containers.md)")
    p.add_argument("--pull-policy", choices=["Always", "IfNotPresent", "Never"],
                   help="as Kubernetes' imagePullPolicy (default: Always for :latest or no tag, else IfNotPresent)")
    p.add_argument("--on-host", action="store_true",
                   help="fairpod's: run the script on the node, not in the image (the image is reported only)")
    p.add_argument("--restart-policy", choices=["OnFailure", "Never"], help="OnFailure restarts only with "
                   "--auto-resume true")
    p.add_argument("--job-kind", choices=["kubeflow/PyTorchJob"], help="the only kind: kubeflow/PyTorchJob")
    p.add_argument("--config-file", metavar="FILE", help="the HyperPod CLI's job YAML (training_cfg, cluster)")
    for verb, hlp in [("get-job", "show a job"), ("cancel-job", "cancel a job"),
                      ("list-pods", "list a job's pods (its replicas)"), ("get-log", "print one pod's output")]:
        p = sub.add_parser(verb, help=hlp, description=hlp[0].upper() + hlp[1:] + ".")
        p.add_argument("--job-name", "--name", dest="job_name", metavar="NAME", required=True)
        _ns_flags(p)
        if verb == "get-log":
            p.add_argument("--pod", "--pod-name", dest="pod", required=True, help="<job>-pod-<i> (see list-pods)")
        if verb == "get-job":
            p.add_argument("--verbose", action="store_true", help="also the job's events")
    p = sub.add_parser("list-jobs", help="list jobs", description="List jobs, as JSON.")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--namespace", "-n", metavar="NAMESPACE", help="one team's namespace")
    g.add_argument("--all-namespaces", "-A", action="store_true", help="every team you may see (the default)")
    return parser


def _team(ns: str | None, what: str = "--namespace") -> str | None:
    if ns is None:
        return None
    from fairpod.cli.jobbody import team_name

    try:
        return team_name(ns)
    except argparse.ArgumentTypeError as e:
        raise CliError(f"{what}: {e}") from None


def _config(path: str) -> Any:
    """The job a HyperPod CLI config file asks for (fairpod.cli.hyp_config); every problem of it in one error."""
    from fairpod.cli import hyp_config
    from fairpod.cli.files import read_yaml

    teams: list[str] = []

    def team_of(ns: str) -> str | None:
        """The team of ``hyperpod-ns-<team>``, or of a namespace named as a team; else None (a Kubernetes
        namespace such as the template's ``kubeflow``)."""
        if not ns.startswith(hyperpod.PREFIX):
            from fairpod.cli.client import Client

            teams[:] = teams or [t["name"] for t in Client().get("/teams")["teams"]]
            return ns if ns in teams else None
        try:
            return _team(ns)
        except CliError:
            return None

    cfg = hyp_config.read(read_yaml(path), path, team_of)
    if len(cfg.problems) == 1:
        raise CliError(f"{path}: {cfg.problems[0]}")
    if cfg.problems:
        raise CliError(f"{path}: fairpod cannot run this job as the file asks ({len(cfg.problems)} problems):\n"
                       + "\n".join(f"  - {p}" for p in cfg.problems))
    for w in cfg.warnings:
        print(f"{ENTRY}: warning: {path}: {w}", file=sys.stderr)
    return cfg


def _one_task_per_node(v: str, what: str) -> None:
    if v not in ("1", "auto"):
        raise CliError(f"{what} {v}: fairpod runs one replica per node (start torchrun's --nproc-per-node "
                       "processes in the script)")


def start_job(a: argparse.Namespace) -> int:
    from fairpod.cli.client import Client
    from fairpod.cli.jobbody import _kv, finish, typed
    from fairpod.formats.kube.pod import ENV_CONFIG

    values: dict[str, str] = {}  # field -> the text given: the config file's, then the flags' (they win)
    env: list[str] = []  # NAME=VALUE, later ones win
    command: list[str] | None = None
    image = a.image
    cfg = _config(a.config_file) if a.config_file else None
    if cfg is not None:
        values.update(cfg.values)
        env += cfg.env
        command = cfg.command
        image = image or cfg.image
    if a.tasks_per_node is not None:
        _one_task_per_node(a.tasks_per_node, "--tasks-per-node")
    values.update({f: getattr(a, flag[2:].replace("-", "_")) for f, flag in FLAGS.items()
                   if getattr(a, flag[2:].replace("-", "_")) is not None})
    team = _team(a.namespace) or _team(a.queue_name, "--queue-name")
    if team:
        values["team"] = team
    if a.entry_script:
        import shlex

        command = ["python", a.entry_script, *(shlex.split(a.script_args) if a.script_args else [])]
    elif a.script_args and command is not None:
        import shlex

        command = command[:2] + shlex.split(a.script_args)
    if command is None:
        raise CliError("give the script to run: --entry-script train.py (or training_cfg.entry_script in "
                       "--config-file)")
    in_image = bool(image) and not a.on_host
    pet = dict(cfg.pet) if cfg else {}
    results = _results_dir(cfg.results_dir, values.get("name")) if cfg and cfg.results_dir else None
    mounts: list[str] = []
    if in_image:  # the script in the image, with the training operator's variables expanded as it starts
        from fairpod.formats.kube.image import image_env

        values["image"] = str(image)
        if a.pull_policy:
            values["image_pull_policy"] = a.pull_policy
        nodes = int(a.node_count) if a.node_count and str(a.node_count).isdigit() else 1
        env += [f"{k}={v}" for k, v in image_env({"elastic": False, **pet}, {"nodes": nodes}).items()]
        mounts = (cfg.mounts if cfg else []) + ([f"{results}:{results}"] if results else [])
    else:
        values.pop("image_pull_policy", None)  # from cluster_config.pullPolicy: there is no image to pull
        moved = [m for m in (cfg.mounts if cfg else []) if m.split(":")[0] not in cfg.host_volumes] if cfg else []
        if moved:
            raise CliError(f"{a.config_file}: volumes {', '.join(moved)}: without the image (--on-host) the job "
                           "sees the node's own paths; a hostPath mounted elsewhere needs the image")
        if pet:
            env.append(f"{ENV_CONFIG}={json.dumps(pet)}")
    if results:
        env.append(f"RESULTS_DIR={results}")
    words = {**JOB_FLAGS, **FLAGS}
    body: dict[str, Any] = {f: typed(f, v, words.get(f)) for f, v in values.items()}
    if env:
        body["env"] = _kv(env)
    body["command"] = command if in_image else [sys.executable, "-m", "fairpod.formats.kube.pod", "--",
                                                 sys.executable, *command[1:]]
    if mounts:
        body["mounts"] = mounts
    body = finish(body, mounts=mounts)
    if cfg and cfg.labels:
        body["labels"] = cfg.labels
    job = Client(fields=JOB_FLAGS).submit(body)
    if results:
        from pathlib import Path

        Path(results, "job.json").write_text(json.dumps({k: job.get(k) for k in (
            "id", "name", "team", "priority", "instance_type", "nodes", "image", "labels")}, indent=1) + "\n")
    if image and not in_image:
        print(f"hyperpod: note: the image {image} is not used (--on-host): the script runs on the node",
              file=sys.stderr)
    print(f"Successfully created job {job['name']}")
    return 0


def _results_dir(base: str, name: str | None) -> str:
    """``base_results_dir/<run name>``, made for the submitter (as the HyperPod CLI makes its results directory)."""
    from pathlib import Path

    path = Path(base, name or "job").absolute()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CliError(f"base_results_dir {base}: cannot make {path}: {e.strerror or e}") from None
    return str(path)


def _params(a: argparse.Namespace) -> dict[str, Any]:
    team = _team(getattr(a, "namespace", None))
    return {"team": team} if team else {}


def _when(ts: float | None) -> str | None:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) if ts else None


def _summary(j: dict[str, Any]) -> dict[str, Any]:
    return {"Name": j["name"], "Namespace": hyperpod.namespace(j["team"]), "CreationTime": _when(j["submit_time"]),
            "State": j["state"], "Priority": hyperpod.priority_class(j["priority"]) if j.get("priority") else None}


def get_job(a: argparse.Namespace) -> int:
    from fairpod.cli.client import Client

    j = Client().get(f"/jobs/{a.job_name}", **_params(a))
    out = {**_summary(j), "Id": j["id"], "Reason": j["reason"], "InstanceType": j["instance_type"],
           "NodeCount": j["nodes"], "Restarts": j["restarts"], "MaxRetry": j["max_retry"],
           "Nodes": j["placement"], "Command": j.get("command")}
    if a.verbose:
        out["Events"] = [{"Time": _when(e["ts"]), "Kind": e["kind"], "Message": e["message"]} for e in j["events"]]
    print(json.dumps(out, indent=1))
    return 0


def list_jobs(a: argparse.Namespace) -> int:
    from fairpod.cli.client import Client

    res = Client().get("/jobs", limit=0, **_params(a))
    print(json.dumps({"jobs": [_summary(j) for j in res["jobs"]]}, indent=1))
    return 0


def cancel_job(a: argparse.Namespace) -> int:
    from fairpod.cli.client import Client

    j = Client().post(f"/jobs/{a.job_name}/cancel", **_params(a))
    print(f"Successfully cancelled job {j['name']}")
    return 0


def list_pods(a: argparse.Namespace) -> int:
    from fairpod.cli.client import Client

    c = Client()
    job = c.get(f"/jobs/{a.job_name}", **_params(a))
    res = c.get(f"/jobs/{job['id']}/replicas")
    pods = [{"PodName": f"{res['job']}-pod-{r['replica']}", "Namespace": hyperpod.namespace(job["team"]),
             "Status": r["state"], "Node": r["node"]} for r in res["replicas"]]
    print(json.dumps({"pods": pods}, indent=1))
    return 0


def get_log(a: argparse.Namespace) -> int:
    from fairpod.cli.client import Client

    prefix = f"{a.job_name}-pod-"
    index = a.pod[len(prefix):] if a.pod.startswith(prefix) else ""
    if not index.isdigit():
        raise CliError(f"--pod {a.pod!r} is not a pod of job {a.job_name}: its pods are {prefix}0, {prefix}1, … "
                       "(hyperpod list-pods)")
    c = Client()
    out = sys.stdout.buffer
    wrote = 0
    for chunk in c.stream(f"/jobs/{a.job_name}/logs", replica=int(index), **_params(a)):
        out.write(chunk)
        wrote += len(chunk)
    out.flush()
    if not wrote:
        j = c.get(f"/jobs/{a.job_name}", **_params(a))
        if j["state"] in ("Failed", "Cancelled"):
            raise CliError(f"pod {a.pod} has no logs: job {j['name']} is {j['state']} ({j['reason']})")
    return 0


VERBS = {"start-job": start_job, "get-job": get_job, "list-jobs": list_jobs, "cancel-job": cancel_job,
         "list-pods": list_pods, "get-log": get_log}


def main(argv: Sequence[str] | None = None) -> int:
    """The ``hyperpod`` executable."""
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if not args.verb:
        build_parser().print_help()
        return 2
    try:
        return VERBS[args.verb](args)
    except CliError as e:
        print(f"{ENTRY}: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def hyp_main(argv: Sequence[str] | None = None) -> int:
    """The ``hyp`` executable: ``fairpod hyp …`` (the HyperPod CLI v3's verbs)."""
    from fairpod.cli.main import main as fairpod_main

    return fairpod_main(["hyp", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
