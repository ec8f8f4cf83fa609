"""``fairpod hyp create hyp-pytorch-job``: the HyperPod CLI's flags read into one fairpod job (fairpod.cli.hyp_cmds
has the other verbs). The team is the namespace ``hyperpod-ns-<team>`` (or the queue
``hyperpod-ns-<team>-localqueue``, else the submitter's only team); ``--max-retry N`` turns auto-resume on with N
restarts, as HyperPod's training operator does. The replicas run as a PyTorchJob's pods would
(``fairpod.formats.kube.pod``: the ``PET_*`` variables torchrun reads). With ``--image`` each replica runs in that
image (docs/containers.md): ``--command`` replaces the image's ENTRYPOINT and ``--args`` are its arguments, as
in the PyTorchJob container HyperPod writes (its ``command`` and ``args``); ``--args`` alone are the arguments of
the image's ENTRYPOINT. ``--on-host`` (fairpod's own) runs the command on the node instead and only reports the
image. Flags whose meaning fairpod cannot give
(persistent volume claims) are refused with one line, never silently dropped; those that mean something only to
Kubernetes are accepted with one warning each."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.jobbody import topology_level
from fairpod.cli.output import emit_json
from fairpod.formats import hyperpod

INSTANCE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
DHC_LABELS = {"deep-health-check-passed": "true", "sagemaker.amazonaws.com/deep-health-check-status": "Passed"}
HEALTH_LABEL = ("sagemaker.amazonaws.com/node-health-status", "Schedulable")

# hyp flags that mean something only to Kubernetes: accepted, each with one warning
K8S_ONLY = {
    "--scheduler-type": "fairpod's own scheduler admits, orders and preempts every job (Kueue's part)",
    "--service-account-name": "there are no Kubernetes service accounts: replicas run as the team's OS user "
                              "(run_as in the cluster spec)",
    "--elastic-replica-increment-step": "an elastic job grows and shrinks one replica at a time",
    "--elastic-replica-discrete-values": "an elastic job may run with any count from --node-count to "
                                         "--max-node-count",
    "--elastic-scaling-timeout-in-seconds": "fairpod grows a job when capacity is idle, without a timeout",
    "--elastic-scale-up-snooze-time-in-seconds": "fairpod grows a job when capacity is idle",
}
LIMITS = {"--accelerators-limit": "accelerators", "--vcpu-limit": "vcpu", "--memory-limit": "memory",
          "--accelerator-partition-limit": "accelerator_partition_count"}


def _bool(v: str) -> bool:
    low = v.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {v!r}")


def _list(v: str) -> list[str]:
    """hyp's list form: ``'[python, train.py, --epochs, 3]'``: brackets that open and close, no empty item."""
    text = v.strip()
    if not (text.startswith("[") and text.endswith("]")) or len(text) < 2:
        missing = "the closing ']'" if text.startswith("[") else "the opening '['"
        raise argparse.ArgumentTypeError(f"{v!r} is not a list: {missing} is missing; write it as "
                                         "'[python, train.py, --epochs, 3]'")
    inner = text[1:-1]
    if "[" in inner or "]" in inner:
        raise argparse.ArgumentTypeError(f"{v!r} is not a list: brackets inside it; write it as "
                                         "'[python, train.py, --epochs, 3]'")
    items = [x.strip() for x in inner.split(",")] if inner.strip() else []
    if any(not x for x in items):
        raise argparse.ArgumentTypeError(f"{v!r} has an empty item (two commas, or one at an end)")
    return items


def _json_map(v: str) -> dict[str, str]:
    try:
        d = json.loads(v)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e}); e.g. '{{\"KEY\": \"value\"}}'") from None
    if not isinstance(d, dict):
        raise argparse.ArgumentTypeError("expected a JSON object, e.g. '{\"KEY\": \"value\"}'")
    return {str(k): "" if x is None else str(x) for k, x in d.items()}


def create_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job-name", required=True)
    p.add_argument("--queue-name", help="hyperpod-ns-<team>-localqueue")
    p.add_argument("--priority", help="<class>-priority (or the class name)")
    p.add_argument("--max-retry", type=int, help="restarts (turns auto-resume on)")
    p.add_argument("--instance-type")
    p.add_argument("--node-count", type=int)
    p.add_argument("--accelerators", type=float, help="per node")
    p.add_argument("--vcpu", type=float, help="per node")
    p.add_argument("--memory", type=float, help="GiB per node")
    p.add_argument("--tasks-per-node", help="processes per node for torchrun (PET_NPROC_PER_NODE): N, auto, gpu, cpu")
    p.add_argument("--deep-health-check-passed-nodes-only", type=_bool, nargs="?", const=True, default=None,
                   metavar="true|false")
    p.add_argument("--environment", type=_json_map, metavar="JSON", help='\'{"KEY": "value"}\'')
    p.add_argument("--label-selector", "--label_selector", type=_json_map, metavar="JSON",
                   help="node labels: the instance type and deep health check labels are understood")
    p.add_argument("--required-topology", type=_topology, metavar="LABEL",
                   help="all replicas in one domain of this topology level (a level of the cluster spec, or its "
                   "node label, e.g. topology.k8s.aws/network-node-layer-3)")
    p.add_argument("--preferred-topology", type=_topology, metavar="LABEL",
                   help="replicas in as few domains of this topology level as fit")
    p.add_argument("--accelerator-partition-type", metavar="PROFILE", help="a MIG profile, e.g. mig-1g.10gb")
    p.add_argument("--accelerator-partition-count", type=int, metavar="N", help="MIG partitions per node")
    p.add_argument("--image", help="the container image each replica runs in (podman on the node; "
                   "docs/containers.md)")
    p.add_argument("--pull-policy", choices=["Always", "IfNotPresent", "Never"],
                   help="as Kubernetes' imagePullPolicy (default: Always for :latest or no tag, else IfNotPresent)")
    p.add_argument("--on-host", action="store_true",
                   help="fairpod's: run the command on the node, not in --image (the image is reported only)")
    p.add_argument("--command", type=_list, metavar="LIST", help="'[python, train.py]': with --image it replaces the "
                   "image's ENTRYPOINT (the container's command)")
    p.add_argument("--args", type=_list, metavar="LIST", help="'[--epochs, 3]': the command's arguments (with --image "
                   "and no --command, the ENTRYPOINT's)")
    p.add_argument("--version", help="the hyp flag schema version (1.0 or 1.1; both read alike)")
    p.add_argument("--volume", action="append", metavar="name=N,type=hostPath,mount_path=P,path=H[,read_only=B]",
                   help="a hostPath volume: the node's directory H at P in the image (type=pvc is refused: "
                   "there are no volume claims)")
    for flag, key in LIMITS.items():
        p.add_argument(flag, dest=key.removesuffix("_count") + "_limit", type=float, metavar="N",
                       help=f"Kubernetes' limit: a fairpod replica gets exactly its request, so the limit is the "
                       f"request when --{key.replace('_', '-')} is not given")
    p.add_argument("--max-node-count", type=int, metavar="N", help="elastic: grow up to N replicas into idle "
                   "capacity (from --node-count), shrink back before being preempted")
    p.add_argument("--elastic-graceful-shutdown-timeout-in-seconds", dest="grace", type=float, metavar="S",
                   help="the grace period between SIGTERM and SIGKILL when a replica is stopped")
    p.add_argument("--debug", action="store_true", help="print the job fairpod submits")
    for flag in K8S_ONLY:
        p.add_argument(flag, dest="k8s_" + flag[2:].replace("-", "_"), metavar="VALUE",
                       help=f"accepted with a warning: {K8S_ONLY[flag]}")


def _topology(v: str) -> str:
    """A topology level, also as HyperPod writes it: ``topology.kubernetes.io/zone=us-west-2a`` (the level's
    label and a domain; fairpod keeps the level)."""
    return topology_level(v.partition("=")[0])


def volume(text: str) -> str:
    """``--volume name=N,type=hostPath,mount_path=P,path=H[,read_only=true]`` as ``H:P[:ro]``."""
    fields: dict[str, str] = {}
    for item in text.split(","):
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise CliError(f"--volume {text}: want name=N,type=hostPath,mount_path=P,path=H (key=value pairs)")
        fields[k.strip()] = v.strip()
    kind = fields.get("type", "hostPath")
    if kind.lower() == "pvc":
        raise CliError(f"--volume {text}: fairpod has no persistent volume claims ({fields.get('claim_name')}); "
                       "mount the node's directory with type=hostPath,path=DIR")
    if kind != "hostPath":
        raise CliError(f"--volume {text}: type {kind} is not known (hostPath)")
    host, mount = fields.get("path"), fields.get("mount_path")
    if not host or not mount or not host.startswith("/") or not mount.startswith("/"):
        raise CliError(f"--volume {text}: give path=HOST_DIR and mount_path=DIR, both absolute")
    unknown = set(fields) - {"name", "type", "mount_path", "path", "read_only"}
    if unknown:
        raise CliError(f"--volume {text}: unknown key(s) {', '.join(sorted(unknown))}")
    return f"{host}:{mount}" + (":ro" if fields.get("read_only", "false").lower() == "true" else "")


def team_of(namespace: str | None, queue: str | None = None) -> str | None:
    found: dict[str, str] = {}
    if namespace is not None:
        m = hyperpod.NS_RE.match(namespace)
        if not m:
            raise CliError(f"namespace {namespace!r} is not a team's namespace: use hyperpod-ns-<team>")
        found[m.group("team")] = f"--namespace {namespace}"
    if queue is not None:
        m = hyperpod.QUEUE_RE.match(queue)
        if m:
            found.setdefault(m.group("team"), f"--queue-name {queue}")
    if len(found) > 1:
        raise CliError("--namespace and --queue-name name different teams: " + ", ".join(found.values()))
    return next(iter(found), None)


def create(a: argparse.Namespace) -> int:
    from fairpod.formats.kube.image import image_env
    from fairpod.formats.kube.pod import ENV_CONFIG

    problems: list[str] = []
    warnings = [f"{flag} {getattr(a, 'k8s_' + flag[2:].replace('-', '_'))}: accepted, no effect here: {why}"
                for flag, why in K8S_ONLY.items() if getattr(a, "k8s_" + flag[2:].replace("-", "_")) is not None]
    team = team_of(a.namespace, a.queue_name)
    if team is None:
        from fairpod.cli.jobbody import only_team

        try:
            team = only_team()
        except CliError as e:
            why = f"--queue-name {a.queue_name} is not hyperpod-ns-<team>-localqueue; " if a.queue_name else ""
            raise CliError(f"which team? {why}give --queue-name hyperpod-ns-<team>-localqueue (or --namespace "
                           f"hyperpod-ns-<team>): {e}") from None
        if a.queue_name:
            warnings.append(f"--queue-name {a.queue_name}: not a team's queue (hyperpod-ns-<team>-localqueue); the "
                            f"job goes to your only team, {team}")
    argv = [*(a.command or []), *(a.args or [])]
    in_image = bool(a.image) and not a.on_host
    if not a.command and not in_image:
        problems.append("give the command to run: --command '[python, train.py]' (or --image, whose entrypoint "
                        "runs)")
    if not a.command and a.args and not in_image:
        problems.append("--args without --command: give the command to run (--args alone are the arguments of an "
                        "--image's entrypoint)")
    body: dict[str, Any] = {"name": a.job_name, "team": team}
    if a.priority:
        body["priority"] = a.priority.removesuffix(hyperpod.PRIORITY_SUFFIX)
    if a.max_retry is not None:
        if a.max_retry < 0:
            problems.append("--max-retry must be 0 or more")
        body.update(auto_resume=a.max_retry > 0, max_retry=max(0, a.max_retry))
    for key, flag in (("accelerators", "--accelerators"), ("vcpu", "--vcpu"), ("memory", "--memory"),
                      ("accelerator_partition", "--accelerator-partition-count")):
        request = getattr(a, key if key != "accelerator_partition" else "accelerator_partition_count")
        limit = getattr(a, key + "_limit")
        if limit is not None and request is None:
            setattr(a, key if key != "accelerator_partition" else "accelerator_partition_count",
                    int(limit) if key == "accelerator_partition" else limit)
        elif limit is not None and limit != request:
            warnings.append(f"{flag.replace('-count', '')}-limit {limit:g}: a fairpod replica gets exactly its "
                            f"request ({flag} {request:g}); the limit is not used")
    fields = {"instance_type": a.instance_type, "nodes": a.node_count, "accelerators": a.accelerators,
              "vcpu": a.vcpu, "memory_gib": a.memory, "termination_grace_seconds": a.grace}
    body.update({k: v for k, v in fields.items() if v is not None})
    if a.max_node_count is not None:
        body.update(max_nodes=a.max_node_count, nodes=a.node_count or 1)
    dhc = bool(a.deep_health_check_passed_nodes_only)
    for k, v in (a.label_selector or {}).items():
        if k in INSTANCE_LABELS:
            if a.instance_type and a.instance_type != v:
                problems.append(f"--label-selector {k}={v} and --instance-type {a.instance_type} differ")
            body["instance_type"] = v
        elif DHC_LABELS.get(k) == v:
            dhc = True
        elif (k, v) == HEALTH_LABEL:
            continue  # fairpod places jobs on schedulable nodes only
        else:
            warnings.append(f"--label-selector {k}={v}: not a label fairpod's nodes carry; fairpod places by "
                            "instance type and deep health check, so it does not narrow the nodes")
    if dhc:
        body["deep_health_check_passed_nodes_only"] = True
    for flag in ("required_topology", "preferred_topology"):
        raw = getattr(a, flag)
        if raw is not None:
            body[flag] = raw
    for key in ("accelerator_partition_type", "accelerator_partition_count"):
        if getattr(a, key) is not None:
            body[key] = getattr(a, key)
    mounts = []
    for v in a.volume or []:
        try:
            mounts.append(volume(v))
        except CliError as e:
            problems.append(str(e))
    if mounts and not in_image:
        moved = [m for m in mounts if m.split(":")[0] != m.split(":")[1]]
        if moved:
            problems.append(f"--volume {', '.join(moved)}: without an image (--on-host) the command sees the node's "
                            "own paths; a directory mounted elsewhere needs --image")
        mounts = []
    if len(problems) == 1:
        raise CliError(f"hyp create hyp-pytorch-job: {problems[0]}")
    if problems:
        raise CliError(f"hyp create hyp-pytorch-job: fairpod cannot run this job as asked ({len(problems)} "
                       "problems):\n" + "\n".join(f"  - {p}" for p in problems))
    env = dict(a.environment or {})
    pet: dict[str, Any] = {"elastic": False}
    if a.tasks_per_node is not None:
        if not re.fullmatch(r"\d+|auto|gpu|cpu", a.tasks_per_node):
            raise CliError(f"--tasks-per-node {a.tasks_per_node!r}: a number, auto, gpu or cpu")
        pet["nproc_per_node"] = a.tasks_per_node
    if in_image:  # the training operator's variables, expanded as the container starts
        body.update(env={**image_env(pet, {"nodes": int(a.node_count or 1)}), **env}, command=argv, image=a.image)
        if a.command:  # the container's command, as HyperPod writes it: it replaces the image's ENTRYPOINT
            body["replace_entrypoint"] = True
        if a.pull_policy:
            body["image_pull_policy"] = a.pull_policy
        if mounts:
            body["mounts"] = mounts
    else:
        env[ENV_CONFIG] = json.dumps(pet)
        body["env"] = env
        body["command"] = [sys.executable, "-m", "fairpod.formats.kube.pod", "--", *argv]
        body["workdir"] = os.getcwd()
    for w in warnings:
        print(f"fairpod: warning: {w}", file=sys.stderr)
    if a.image and not in_image:
        print(f"fairpod: note: the image {a.image} is not used (--on-host): the command runs on the node, which "
              "needs its interpreter, libraries and code", file=sys.stderr)
    from fairpod.cli.jobbody import finish

    body = finish(body)
    if a.debug:
        emit_json(body)
    job = Client().submit(body)
    print(f"hyp-pytorch-job {job['name']} created in namespace {hyperpod.namespace(job['team'])}: fairpod job {job['id']}, "
          f"{job['state']} — {job['reason']}")
    return 0
