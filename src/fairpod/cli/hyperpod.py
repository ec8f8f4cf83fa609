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

Reads answer in JSON, as the HyperPod CLI does. ``--config-file`` takes the HyperPod CLI's own YAML: the
``training_cfg`` (entry script, arguments, run name, nodes) and ``cluster`` (instance type, namespace, Kueue
labels) fields are mapped to the job's; a field whose meaning fairpod cannot give is refused by name, never
dropped. The entry script runs as ``python SCRIPT ARGS`` on each node with the job's replicas' environment
(``fairpod.formats.kube.pod``: the ``PET_*`` variables torchrun reads).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from fairpod.cli.errors import CliError

ENTRY = "hyperpod"
# HyperPod config fields that configure the HyperPod CLI's own config loader (Hydra), not the job
LOADER_KEYS = {"defaults", "hydra"}
# cluster.cluster_config fields fairpod gives as the HyperPod CLI does, or that mean nothing for a job here
SAME_MEANING = {"pullPolicy", "restartPolicy"}
REFUSED = {
    "volumes": "volumes are not mounted: the command runs on the node, paths refer to the node's files",
    "persistent_volume_claims": "there are no Kubernetes volume claims: paths refer to the node's files",
    "service_account_name": "there are no Kubernetes service accounts: replicas run as the team's OS user",
    "annotations": "there are no pod annotations: the job's labels are its team and priority",
    "base_results_dir": "there is no results volume: each replica's output is its log (hyperpod get-log)",
    "scheduler_type": "fairpod's scheduler places every job",
}


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
    p.add_argument("--job-name", "--name", dest="job_name", metavar="NAME")
    _ns_flags(p)
    p.add_argument("--queue-name", metavar="QUEUE", help="hyperpod-ns-<team>-localqueue")
    p.add_argument("--instance-type")
    p.add_argument("--node-count", metavar="N")
    p.add_argument("--tasks-per-node", metavar="N", help="1 (one replica per node), as fairpod runs them")
    p.add_argument("--entry-script", metavar="SCRIPT", help="the Python script each replica runs")
    p.add_argument("--script-args", metavar="ARGS", help="its arguments, one string ('--epochs 3')")
    p.add_argument("--priority", metavar="CLASS", help="priority class (HyperPod's <class>-priority works)")
    p.add_argument("--auto-resume", metavar="true|false")
    p.add_argument("--max-retry", metavar="N")
    p.add_argument("--deep-health-check-passed-nodes-only", metavar="true|false")
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
    from fairpod.cli.job_cmds import team_name

    try:
        return team_name(ns)
    except argparse.ArgumentTypeError as e:
        raise CliError(f"{what}: {e}") from None


def _config_args(path: str) -> tuple[list[str], list[str] | None, str | None]:
    """fairpod start-job flags, the command and the image from a HyperPod CLI config file."""
    from fairpod.cli.files import read_yaml

    doc = read_yaml(path)
    if not isinstance(doc, dict):
        raise CliError(f"{path}: expected the HyperPod CLI's job config (training_cfg, cluster, …)")

    def refuse(field: str, why: str) -> NoReturn:
        raise CliError(f"{path}: {field} is not supported by fairpod: {why}")

    args: list[str] = []
    known = {"training_cfg", "cluster", "container", "env_vars", *LOADER_KEYS, *REFUSED}
    for k in doc:
        if k in REFUSED:
            refuse(k, REFUSED[k])
        if k not in known:
            refuse(k, "not a field of the HyperPod CLI's job config that fairpod knows")
    tc = doc.get("training_cfg") or {}
    cl = doc.get("cluster") or {}
    if not isinstance(tc, dict) or not isinstance(cl, dict):
        raise CliError(f"{path}: training_cfg and cluster must be mappings")
    command = None
    for k, v in tc.items():
        if k == "entry_script":
            command = ["python", str(v)]
        elif k == "script_args":
            pass  # below, once the entry script is known
        elif k == "run":
            if not isinstance(v, dict):
                raise CliError(f"{path}: training_cfg.run must be a mapping (name, nodes, ntasks_per_node)")
            for rk, rv in v.items():
                if rk == "name":
                    args += ["--name", str(rv)]
                elif rk == "nodes":
                    args += ["--node-count", str(rv)]
                elif rk == "ntasks_per_node":
                    _one_task_per_node(str(rv), f"{path}: training_cfg.run.ntasks_per_node")
                else:
                    refuse(f"training_cfg.run.{rk}", "fairpod's job has a name, nodes and one task per node")
        else:
            refuse(f"training_cfg.{k}", "fairpod's job takes entry_script, script_args and run")
    if tc.get("script_args") and command is None:
        raise CliError(f"{path}: training_cfg.script_args without training_cfg.entry_script")
    if command is not None:
        command += _script_args(tc.get("script_args"), f"{path}: training_cfg.script_args")
    for k, v in cl.items():
        if k == "instance_type":
            args += ["--instance-type", str(v)]
        elif k == "cluster_type":
            if str(v) != "k8s":
                refuse("cluster.cluster_type", f"{v!r}: fairpod runs HyperPod's EKS (k8s) jobs")
        elif k == "cluster_config":
            args += _cluster_config(v, path, refuse)
        else:
            refuse(f"cluster.{k}", "fairpod's cluster takes instance_type, cluster_type and cluster_config")
    env = doc.get("env_vars") or {}
    if not isinstance(env, dict):
        raise CliError(f"{path}: env_vars must be a mapping of NAME: value")
    for k, v in env.items():
        args += ["--env", f"{k}={'' if v is None else v}"]
    image = doc.get("container")
    return args, command, str(image) if image else None


def _cluster_config(cc: Any, path: str, refuse: Any) -> list[str]:
    if not isinstance(cc, dict):
        raise CliError(f"{path}: cluster.cluster_config must be a mapping")
    args: list[str] = []
    for k, v in cc.items():
        if k == "namespace":
            args += ["--team", str(_team(str(v), f"{path}: cluster.cluster_config.namespace"))]
        elif k == "custom_labels":
            for lk, lv in (v or {}).items():
                if lk == "kueue.x-k8s.io/queue-name":
                    args += ["--team", str(_team(str(lv), f"{path}: cluster.cluster_config.custom_labels.{lk}"))]
                elif lk == "kueue.x-k8s.io/priority-class":
                    args += ["--priority", str(lv)]
                else:
                    refuse(f"cluster.cluster_config.custom_labels.{lk}", "fairpod knows Kueue's queue-name "
                           "and priority-class labels")
        elif k == "label_selector":
            refuse("cluster.cluster_config.label_selector", "nodes are chosen by instance_type (and "
                   "--deep-health-check-passed-nodes-only), not by labels")
        elif k in REFUSED:
            refuse(f"cluster.cluster_config.{k}", REFUSED[k])
        elif k == "pullPolicy":
            if str(v) not in ("Always", "IfNotPresent", "Never"):
                refuse("cluster.cluster_config.pullPolicy", f"{v!r}: Always, IfNotPresent or Never")
            args += ["--image-pull-policy", str(v)]
        elif k == "restartPolicy" and str(v) not in ("OnFailure", "Never"):
            refuse("cluster.cluster_config.restartPolicy", f"{v!r}: OnFailure or Never")
        elif k not in SAME_MEANING:
            refuse(f"cluster.cluster_config.{k}", "not a field fairpod knows")
    return args


def _script_args(v: Any, what: str) -> list[str]:
    """HyperPod's script_args: a list of strings, or of one-key mappings ({--epochs: 3})."""
    if v is None:
        return []
    if isinstance(v, str):
        import shlex

        return shlex.split(v)
    if not isinstance(v, list):
        raise CliError(f"{what}: expected a list ('--epochs', 3 or --epochs: 3)")
    out: list[str] = []
    for item in v:
        if isinstance(item, dict):
            for k, x in item.items():
                out += [str(k), str(x)]
        else:
            out.append(str(item))
    return out


def _one_task_per_node(v: str, what: str) -> None:
    if v not in ("1", "auto"):
        raise CliError(f"{what} {v}: fairpod runs one replica per node (start torchrun's --nproc-per-node "
                       "processes in the script)")


def start_job(a: argparse.Namespace) -> int:
    from fairpod.cli.client import Client
    from fairpod.cli.job_cmds import JOB_FLAGS, job_body
    from fairpod.cli.main import build_parser as fairpod_parser

    argv: list[str] = ["start-job"]
    command: list[str] | None = None
    image = a.image
    if a.config_file:
        extra, command, cfg_image = _config_args(a.config_file)
        argv += extra
        image = image or cfg_image
    if a.tasks_per_node is not None:
        _one_task_per_node(a.tasks_per_node, "--tasks-per-node")
    for flag, value in [("--name", a.job_name), ("--instance-type", a.instance_type),
                        ("--node-count", a.node_count), ("--priority", a.priority),
                        ("--auto-resume", a.auto_resume), ("--max-retry", a.max_retry),
                        ("--deep-health-check-passed-nodes-only", a.deep_health_check_passed_nodes_only)]:
        if value is not None:
            argv += [flag, value]
    team = _team(a.namespace) or _team(a.queue_name, "--queue-name")
    if team:
        argv += ["--team", team]
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
    if in_image:  # the script in the image, with the training operator's variables expanded as it starts
        from fairpod.formats.kube.image import image_env

        argv += ["--image", str(image)] + (["--image-pull-policy", a.pull_policy] if a.pull_policy else [])
        nodes = int(a.node_count) if a.node_count and str(a.node_count).isdigit() else 1
        for k, v in image_env({"elastic": False}, {"nodes": nodes}).items():
            argv += ["--env", f"{k}={v}"]
    else:
        while "--image-pull-policy" in argv:  # from cluster_config.pullPolicy: there is no image to pull
            i = argv.index("--image-pull-policy")
            del argv[i:i + 2]
    ns = fairpod_parser("start-job").parse_args(argv)
    if in_image:
        ns.job_command = command
    else:
        ns.job_command = [sys.executable, "-m", "fairpod.formats.kube.pod", "--", sys.executable, *command[1:]]
    body = job_body(ns)
    job = Client(fields=JOB_FLAGS).submit(body)
    if image and not in_image:
        print(f"hyperpod: note: the image {image} is not used (--on-host): the script runs on the node",
              file=sys.stderr)
    print(f"Successfully created job {job['name']}")
    return 0


def _params(a: argparse.Namespace) -> dict[str, Any]:
    team = _team(getattr(a, "namespace", None))
    return {"team": team} if team else {}


def _when(ts: float | None) -> str | None:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) if ts else None


def _summary(j: dict[str, Any]) -> dict[str, Any]:
    return {"Name": j["name"], "Namespace": f"hyperpod-ns-{j['team']}", "CreationTime": _when(j["submit_time"]),
            "State": j["state"], "Priority": f"{j['priority']}-priority" if j.get("priority") else None}


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
    pods = [{"PodName": f"{res['job']}-pod-{r['replica']}", "Namespace": f"hyperpod-ns-{job['team']}",
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
