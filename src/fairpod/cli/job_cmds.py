"""Data scientists' commands: start-job, list-jobs, get-job (describe), cancel-job, list-pods, get-logs (logs).

Flags take the forms HyperPod users type: ``--auto-resume true``, ``--namespace hyperpod-ns-<team>``,
``--queue-name hyperpod-ns-<team>-localqueue``, ``--priority <class>-priority``, ``--all-namespaces``.

Longer than fairpod's usual module (~570 lines): the parsers of these commands share their flag types and the
job-field words (``JOB_FLAGS``) that the server's errors are translated with; the CLI builds only the invoked
command's parser, so size costs no start-up time.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable

from fairpod.cli.client import Client, TimedOut
from fairpod.cli.errors import CliError
from fairpod.cli.files import read_yaml
from fairpod.cli.output import acc_nodes, add_output, ago, emit, plural, reason_in_units, table
from fairpod.formats import hyperpod
from fairpod.model.keys import task_ref

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any

STATES = ["Pending", "Running", "Preempted", "Succeeded", "Failed", "Cancelled"]
# patterns (re compiles and caches them on first use: a command that checks no name pays nothing)
NAME_RE = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
ARRAY_RE = r"\d+(-\d+(:\d+)?)?(,\d+(-\d+(:\d+)?)?)*(%\d+)?"

# the API's job fields in the words of start-job's flags (for the server's error messages)
JOB_FLAGS = {"name": "--name", "team": "--team", "priority": "--priority", "instance_type": "--instance-type",
             "nodes": "--node-count", "accelerators": "--accelerators", "vcpu": "--vcpu", "memory_gib": "--memory",
             "command": "the command after --", "env": "--env", "workdir": "--workdir",
             "auto_resume": "--auto-resume", "max_retry": "--max-retry",
             "termination_grace_seconds": "--grace-seconds", "min_runtime_seconds": "--min-runtime",
             "expected_duration_seconds": "--expected-duration",
             "deep_health_check_passed_nodes_only": "--deep-health-check-passed-nodes-only",
             "max_runtime_seconds": "--max-runtime", "hang_timeout_seconds": "--hang-timeout",
             "hang_action": "--hang-action", "required_topology": "--required-topology",
             "preferred_topology": "--preferred-topology",
             "accelerator_partition_type": "--accelerator-partition-type",
             "accelerator_partition_count": "--accelerator-partition-count",
             "min_nodes": "--min-nodes", "max_nodes": "--max-nodes",
             "service": "the service's checks (fairpod start-service)", "ray": "--ray",
             "image": "--image", "image_pull_policy": "--image-pull-policy", "mounts": "--mount",
             "scratch": "--scratch", "ready_timeout_seconds": "--ready-timeout", "ready_signal": "--ready-signal",
             "restarts_in_place": "--restarts-in-place", "restart_eval_period_seconds": "--restart-eval-period",
             "log_rules": "--log-rule", "labels": "labels (--config-file's labels: a mapping)",
             "array": "--array", "job": "the job"}  # fmt: skip
CONFIG_KEYS = set(JOB_FLAGS) - {"array", "job"}  # = JobSpec's fields but user (tests/cli/test_job_flags.py)
# the JobSpec fields that a flag of start-job sets as it is (the flag's argparse dest: its name with '_')
SPEC_FLAGS = {field: flag for field, flag in JOB_FLAGS.items()
              if flag.startswith("--") and field not in ("env", "array", "mounts", "scratch", "log_rules")}
KINDS = {"service": "service ('fairpod get-service {name}': its address and ready endpoints)",
         "ray": "Ray job (a private Ray cluster on its replicas: head on rank 0)"}
TRUE, FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


def boolean(v: str) -> bool:
    if v.lower() in TRUE:
        return True
    if v.lower() in FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{v!r} is not true or false")


def whole(lo: int, hi: int, what: str = "") -> Callable[[str], int]:
    def parse(v: str) -> int:
        try:
            f = float(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{v!r} is not a number") from None
        if f != int(f):
            raise argparse.ArgumentTypeError(f"{v} is not a whole number{what}")
        if not lo <= f <= hi:
            raise argparse.ArgumentTypeError(f"{v} is out of range: {lo}..{hi}")
        return int(f)

    return parse


MEMORY_UNITS = {"": 1.0, "gi": 1.0, "g": 1e9 / 2**30, "mi": 1 / 1024, "m": 1e6 / 2**30, "ti": 1024.0,
                "t": 1e12 / 2**30}


def memory_gib(text: str) -> float:
    """``16Gi``, ``512Mi``, ``16G`` (as Kubernetes writes quantities) or a number of GiB, as GiB."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in MEMORY_UNITS or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size (e.g. 16Gi, 512Mi, or GiB as a number)")
    return float(m.group(1)) * MEMORY_UNITS[unit]


def vcpus(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = 0.0
    if not 0 < v <= 100_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of vCPUs (e.g. 4 or 0.5)")
    return v


def seconds(hi: float) -> Callable[[str], float]:
    def parse(v: str) -> float:
        try:
            f = float(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{v!r} is not a number of seconds") from None
        if not 0 <= f <= hi:
            raise argparse.ArgumentTypeError(f"{v} is out of range: 0..{hi:g} seconds")
        return f

    return parse


def job_name(v: str) -> str:
    if not re.fullmatch(NAME_RE, v) or len(v) > 63:
        raise argparse.ArgumentTypeError(
            f"{v!r} is not a job name: use lower-case letters, digits and '-', starting and ending with a letter "
            "or digit, at most 63 characters")
    return v


def team_name(v: str) -> str:
    """A team, also as HyperPod's namespace (hyperpod-ns-<team>) or local queue (hyperpod-ns-<team>-localqueue)."""
    team = hyperpod.team_part(v)
    if not re.fullmatch(NAME_RE, team) or len(team) > 40:
        raise argparse.ArgumentTypeError(
            f"{v!r} is not a team: use lower-case letters, digits and '-', at most 40 characters "
            "(or hyperpod-ns-<team>)")
    return team


def topology_level(v: str) -> str:
    """A topology level of the cluster spec (e.g. rack); also as a Kueue node label (…/topology-rack)."""
    level = v.rsplit("/", 1)[-1]
    level = level[len("topology-"):] if level.startswith("topology-") and len(level) > 9 else level
    if not re.fullmatch(NAME_RE, level) or len(level) > 40:
        raise argparse.ArgumentTypeError(f"{v!r} is not a topology level: give one of the cluster's "
                                         "topology_levels, e.g. rack")
    return level


def priority_class(v: str) -> str:
    """HyperPod's priority class names end in -priority (training-priority is the class 'training')."""
    return hyperpod.class_of(v)


def array_spec(v: str) -> str:
    if not re.fullmatch(ARRAY_RE, v):
        raise argparse.ArgumentTypeError(
            f"{v!r} is not an array: use FIRST-LAST[:STEP] or a comma list (0-9, 1,3,5, 0-99:2), and %%N to run at "
            "most N tasks at a time (0-199%%16)")
    return v


def _team_flags(p: argparse.ArgumentParser, required_hint: bool = False) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--team", type=team_name, help="the team (also hyperpod-ns-<team>)")
    g.add_argument("--namespace", "-n", dest="team", type=team_name, metavar="NAMESPACE",
                   help="HyperPod's form of --team: hyperpod-ns-<team>")
    if required_hint:
        g.add_argument("--queue-name", dest="team", type=team_name, metavar="QUEUE",
                       help="Kueue's form of --team: hyperpod-ns-<team>-localqueue")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "start-job", help="submit a job (or a job array with --array)",
        description="Submit a job: NODE-COUNT replicas of COMMAND, each on its own node of INSTANCE-TYPE with "
        "ACCELERATORS accelerators (default: the whole node). Flags override the fields of --config-file. "
        "Everything after -- is the command, as it is.",
        epilog="examples:\n  fairpod start-job --name train --team john --node-count 2 --auto-resume true "
        "--max-retry 3 -- python train.py\n  fairpod start-job --config-file job.yaml --auto-resume true "
        "--max-retry 2\n  fairpod start-job --name sweep --team john --array 0-199%16 -- python sweep.py",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", "--job-name", type=job_name, help="job name (lower-case letters, digits, '-')")
    _team_flags(p, required_hint=True)
    p.add_argument("--priority", type=priority_class,
                   help="priority class (see 'fairpod policy show'); HyperPod's <class>-priority works too")
    p.add_argument("--instance-type", help="instance type (default: the cluster's only one); several, comma-"
                   "separated in order of preference (ml.p5.48xlarge,ml.p4d.24xlarge): it starts on the first that "
                   "fits now")
    p.add_argument("--node-count", type=whole(1, 10_000), help="replicas, one per node (default 1)")
    p.add_argument("--min-nodes", type=whole(1, 10_000), metavar="N",
                   help="elastic: start with N replicas when only N fit (default --node-count; needs --max-nodes)")
    p.add_argument("--max-nodes", type=whole(1, 10_000), metavar="M",
                   help="elastic: grow into idle capacity up to M replicas; when capacity is reclaimed the replicas "
                   "above N get SIGTERM and go instead of the whole job (FAIRPOD_MIN_NODES, FAIRPOD_MAX_NODES, "
                   "FAIRPOD_NODES; e.g. torchrun --nnodes $FAIRPOD_MIN_NODES:$FAIRPOD_MAX_NODES --rdzv-backend c10d)")
    p.add_argument("--accelerators", type=whole(0, 1024, ": a replica gets whole accelerators"),
                   help="whole accelerators per node (default: the whole node)")
    p.add_argument("--vcpu", type=vcpus, metavar="N",
                   help="vCPUs per replica (default: by the node type's ratio to --accelerators); the replica is held "
                   "to them by its cgroup")
    p.add_argument("--memory", type=memory_gib, metavar="SIZE",
                   help="memory per replica, e.g. 16Gi or 512Mi (default: by ratio); more ends the replica with "
                   "'exceeded its memory limit'")
    p.add_argument("--auto-resume", nargs="?", const=True, type=boolean, metavar="true|false",
                   help="restart the job (up to --max-retry times) when a replica fails or its node does; "
                   "'--auto-resume' alone means true")
    p.add_argument("--max-retry", type=whole(0, 1000), help="restarts allowed (needs --auto-resume true)")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="environment variable (repeatable)")
    p.add_argument("--workdir", help="working directory of the replicas (default: this directory; in an --image: "
                   "the image's, and a --workdir given is mounted into the container at its own path)")
    p.add_argument("--image", metavar="REF",
                   help="run each replica in this container image (podman on the node; docs/containers.md); with "
                   "no command after --, the image's own entrypoint runs")
    p.add_argument("--image-pull-policy", choices=["Always", "IfNotPresent", "Never"],
                   help="as Kubernetes: default Always for :latest or no tag, else IfNotPresent")
    p.add_argument("--mount", action="append", default=[], metavar="HOST:CONTAINER[:ro]",
                   help="with --image: bind a host directory into the container (repeatable)")
    p.add_argument("--scratch", action="append", default=[], metavar="PATH[:MIB]",
                   help="with --image: an empty in-memory directory of the replica's own at PATH, counted in its "
                   "memory (/dev/shm: its size; Kubernetes' emptyDir; repeatable)")
    p.add_argument("--grace-seconds", type=seconds(3600),
                   help="seconds from SIGTERM to SIGKILL when the job is stopped (default 30)")
    p.add_argument("--min-runtime", type=seconds(7 * 86400),
                   help="seconds after each start during which the job is never preempted")
    p.add_argument("--expected-duration", type=seconds(365 * 86400), metavar="SECONDS",
                   help="how long the job runs once started: the estimated start of the jobs behind it counts on "
                   "it, and capacity held for a starving job is lent to it if it ends in time")
    p.add_argument("--deep-health-check-passed-nodes-only", nargs="?", const=True, type=boolean,
                   metavar="true|false",
                   help="run only on nodes whose deep health checks passed (not on nodes never checked)")
    p.add_argument("--max-runtime", type=seconds(365 * 86400), metavar="SECONDS",
                   help="stop each attempt after this many seconds (then Failed or requeued, as the priority "
                   "class says; default and maximum from the class)")
    p.add_argument("--hang-timeout", type=seconds(30 * 86400), metavar="SECONDS",
                   help="the job is hung after this long (10 or more) with no progress report and no output, "
                   "or only idle GPUs")
    p.add_argument("--hang-action", choices=["notify", "restart", "cancel"],
                   help="what a hang does: an event (default), a restart (counts against --max-retry), a cancel")
    p.add_argument("--ready-timeout", type=seconds(7 * 86400), metavar="SECONDS",
                   help="gang readiness: every replica ready within this long of the start, else the attempt is "
                   "stopped and requeued with backoff (default: the policy's ready_timeout_seconds)")
    p.add_argument("--ready-signal", choices=["started", "sdk"],
                   help="what makes a replica ready: its process started (default), or its call of "
                   "fairpod.sdk.ready() or a progress report")
    p.add_argument("--restarts-in-place", type=whole(0, 100), metavar="N",
                   help="restart a failed replica's process on its node (the others keep running) up to N times "
                   "within --restart-eval-period before the job restarts whole (--max-retry)")
    p.add_argument("--log-rule", action="append", nargs=3, default=[], metavar=("NAME", "ACTION", "REGEX"),
                   help="a rule over the replicas' output (repeatable). ACTION is notify, restart_in_place, restart "
                   "or fail, and may end in :within=S (no matching line within S s of the start is a fault), "
                   ":every=S (no matching line for S s is) or :metric>X[:points=N] (the number REGEX's first group "
                   "captures is >, >=, < or <= X in N readings in a row of a replica; default 1; a capture that is "
                   "not a number is no reading); otherwise a matching line is the fault. REGEX is RE2 syntax "
                   "(linear time: no backreferences or lookaround), matched per line. E.g. --log-rule nan fail "
                   "'loss[=:] *nan' --log-rule loss restart:every=600 'loss[=:]' --log-rule diverged "
                   "restart:metric>10:points=3 'loss=(\\S+)'")
    p.add_argument("--restart-eval-period", type=seconds(30 * 86400), metavar="SECONDS",
                   help="the window --restarts-in-place counts restarts in (default 3600)")
    p.add_argument("--required-topology", type=topology_level, metavar="LEVEL",
                   help="all replicas in one domain of this topology level (e.g. rack), else the job waits")
    p.add_argument("--preferred-topology", type=topology_level, metavar="LEVEL",
                   help="replicas in as few domains of this topology level (e.g. rack) as fit now")
    p.add_argument("--accelerator-partition-type", metavar="PROFILE",
                   help="run on nodes whose GPUs are split into this MIG profile (e.g. mig-1g.10gb)")
    p.add_argument("--accelerator-partition-count", type=whole(1, 1024), metavar="N",
                   help="MIG partitions per node (default 1; needs --accelerator-partition-type)")
    p.add_argument("--ray", nargs="?", const=True, type=boolean, metavar="true|false",
                   help="a Ray job: fairpod starts a private Ray cluster on the replicas (head on rank 0, a worker on "
                   "each other; each Ray node offers exactly the replica's accelerators, vCPUs and memory) and runs "
                   "the command on rank 0 with RAY_ADDRESS set")
    p.add_argument("--array", type=array_spec, metavar="SPEC",
                   help="submit a job array: one task per index (0-199, 1,3,5, 0-99:2), at most N at a time with "
                   "%%N; each task gets FAIRPOD_ARRAY_TASK_ID and SLURM_ARRAY_TASK_ID")
    p.add_argument("--config-file", metavar="FILE", help="job spec as YAML (name, team, command, nodes, …)")
    add_output(p)
    p.set_defaults(func=start_job, job_command=None)

    p = sub.add_parser("list-jobs", help="list jobs of your teams",
                       description="List jobs, newest last; the tasks of a job array are one line unless "
                       "--array-tasks.")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--team", type=team_name, help="only this team's jobs (also hyperpod-ns-<team>)")
    g.add_argument("--namespace", dest="team", type=team_name, metavar="NAMESPACE",
                   help="HyperPod's form of --team: hyperpod-ns-<team>")
    g.add_argument("--all-teams", "--all-namespaces", "-A", action="store_true",
                   help="every team you may see (the default)")
    p.add_argument("--status", type=_states, action="extend", metavar="STATE[,STATE…]",
                   help=f"filter by state, repeatable or comma-separated: {', '.join(STATES)}")
    p.add_argument("--limit", type=whole(0, 100_000), default=500,
                   help="show the newest N jobs (default 500; 0: all)")
    p.add_argument("--array-tasks", action="store_true", help="one line per task of a job array")
    add_output(p)
    p.set_defaults(func=list_jobs)

    for name, aliases, func, hlp in [
        ("get-job", ["describe"], get_job, "show a job: state, reason, queue position, borrowing, events"),
        ("cancel-job", [], cancel_job, "cancel a job (running replicas get SIGTERM)"),
        ("list-pods", [], list_pods, "list a job's replicas: node, accelerators, state"),
    ]:
        p = sub.add_parser(name, aliases=aliases, help=hlp, description=hlp[0].upper() + hlp[1:] + ".")
        _job_arg(p)
        _team_flags(p)
        add_output(p)
        p.set_defaults(func=func)

    p = sub.add_parser("get-logs", aliases=["logs"], help="print a job's output",
                       description="Print the output of one replica of a job's latest attempt (or of all with "
                       "--all-replicas, each line prefixed with its replica); --follow keeps printing until the "
                       "job ends, and waits for a pending job to start.")
    _job_arg(p)
    _team_flags(p)
    p.add_argument("--replica", type=whole(0, 10_000), default=0, help="which replica (default 0)")
    p.add_argument("--all-replicas", action="store_true", help="every replica, lines prefixed with [replica]")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
    p.add_argument("--tail", type=whole(1, 1_000_000), metavar="N",
                   help="only the last N lines (the server reads them from the end of the log, however long)")
    p.set_defaults(func=get_logs)


def _job_arg(p: argparse.ArgumentParser) -> None:
    """The job: NAME (or id; an array's name or id, ID_T or NAME-T a task), or HyperPod's --job-name NAME."""
    p.add_argument("job", metavar="NAME", nargs="?", help="job name or id (a job array: its name or id; one "
                   "task: NAME-T or ID_T)")
    p.add_argument("--job-name", dest="job_name", metavar="NAME", help="the HyperPod CLI's form of NAME")


def _state(v: str) -> str:
    for s in STATES:
        if s.lower() == v.lower():
            return s
    raise argparse.ArgumentTypeError(f"{v!r} is not a state: {', '.join(STATES)}")


def _states(v: str) -> list[str]:
    """``Running,Pending`` (as kubectl and squeue -t take them): each a state."""
    return [_state(x.strip()) for x in v.split(",") if x.strip()] or [_state(v)]


def _kv(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise CliError(f"--env {it!r}: use --env NAME=VALUE")
        out[k] = v
    return out


def _config(path: str) -> dict[str, Any]:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise CliError(f"{path}: expected a mapping of job fields (name, team, command, nodes, …)")
    unknown = sorted(set(data) - CONFIG_KEYS)
    if unknown:
        raise CliError(f"{path}: unknown field(s) {', '.join(unknown)}; job fields are "
                       f"{', '.join(sorted(CONFIG_KEYS))}")
    if isinstance(data.get("command"), str):
        import shlex

        data["command"] = shlex.split(data["command"])
    if "team" in data and isinstance(data["team"], str):
        try:
            data["team"] = team_name(data["team"])
        except argparse.ArgumentTypeError as e:
            raise CliError(f"{path}: team: {e}") from None
    if isinstance(data.get("priority"), str):
        data["priority"] = priority_class(data["priority"])
    acc = data.get("accelerators")
    if isinstance(acc, float) and acc != int(acc):
        raise CliError(f"{path}: accelerators: {acc:g} is not a whole number: a replica gets whole accelerators")
    return data


def job_body(a: argparse.Namespace) -> dict[str, Any]:
    """The job to submit, from --config-file and the flags; every mistake a user can make is reported here."""
    body: dict[str, Any] = _config(a.config_file) if a.config_file else {}
    flags = {field: getattr(a, flag[2:].replace("-", "_")) for field, flag in SPEC_FLAGS.items()}
    body.update({k: v for k, v in flags.items() if v is not None})
    if a.env:
        body["env"] = {**(body.get("env") or {}), **_kv(a.env)}
    if getattr(a, "log_rule", None):
        body["log_rules"] = [*(body.get("log_rules") or []), *_log_rules(a.log_rule)]
    if a.job_command is not None:
        body["command"] = a.job_command
    if a.mount:
        body["mounts"] = [*(body.get("mounts") or []), *a.mount]
    if getattr(a, "scratch", None):
        body["scratch"] = [*(body.get("scratch") or []), *a.scratch]
    for m in a.mount:
        parts = m.split(":")
        if len(parts) not in (2, 3) or not all(x.startswith("/") for x in parts[:2]) or parts[2:] not in ([], ["ro"], ["rw"]):
            raise CliError(f"--mount {m}: give HOST:CONTAINER or HOST:CONTAINER:ro, both absolute paths")
    if (body.get("mounts") or body.get("image_pull_policy")) and not body.get("image"):
        raise CliError("--mount and --image-pull-policy go with --image (the container image to run in)")
    src = f" (or set it in {a.config_file})" if a.config_file else " (or set it in --config-file)"
    if not body.get("name"):
        raise CliError(f"--name is required{src}")
    if not body.get("team"):
        body["team"] = only_team(src)
    cmd = body.get("command")
    if not cmd and body.get("image"):
        cmd = body["command"] = []  # the image's own entrypoint and command
    elif not cmd:
        raise CliError("give the job's command after --, e.g. fairpod start-job --name x --team t -- python "
                       "train.py")
    if not isinstance(cmd, list) or not all(isinstance(w, str) for w in cmd) or (cmd and not cmd[0].strip()):
        import shlex

        raise CliError(f"the command {shlex.join(map(str, cmd)) if isinstance(cmd, list) else cmd!r} has no "
                       "program to run: give one after --, e.g. -- python train.py")
    if body.get("max_retry") and not body.get("auto_resume"):
        raise CliError(f"--max-retry {body['max_retry']} does nothing without --auto-resume true: add "
                       "--auto-resume true (restarts on failure) or leave --max-retry out")
    if body.get("workdir") is None and not body.get("image"):  # in an image: the image's own WORKDIR
        body["workdir"] = os.getcwd()
    return body


def _log_rules(given: list[list[str]]) -> list[dict[str, Any]]:
    from pydantic import ValidationError

    from fairpod.model.logrules import parse_flag

    out = []
    for name, what, pattern in given:
        try:
            out.append(parse_flag(name, what, pattern).model_dump(exclude_none=True))
        except ValidationError as e:
            err = e.errors()[0]
            where, msg = ".".join(str(x) for x in err["loc"]), str(err["msg"]).removeprefix("Value error, ")
            raise CliError(f"--log-rule {name}: {where + ': ' if where and where not in msg else ''}{msg}") from None
        except ValueError as e:
            raise CliError(f"--log-rule {name}: {e}") from None
    return out


def goodput_text(g: dict[str, Any] | None) -> str | None:
    """'92.0 % (3.1 accelerator-hours kept; lost: 0.3 to preemption)' from get-job's goodput."""
    if not g or g.get("goodput") is None:
        return None
    lost = [f"{v / 3600:.2f} to {c}" for c, v in g["lost_accelerator_seconds"].items() if v]
    return (f"{g['goodput'] * 100:.1f} % ({g['kept_accelerator_seconds'] / 3600:.2f} accelerator-hours kept"
            + (f"; lost: {', '.join(lost)}" if lost else "") + ")")


def only_team(src: str = "") -> str:
    """The team of a member of exactly one team (who then needs no --team); else the error that asks for it."""
    me = Client().get("/me")
    teams = me.get("teams") or []
    if me.get("role") == "member" and len(teams) == 1:
        return str(teams[0])
    mine = f"; you are in {', '.join(teams)}" if len(teams) > 1 else ""
    raise CliError(f"--team is required{src}{mine}")


def start_job(a: argparse.Namespace) -> int:
    body = job_body(a)
    c = Client(fields=JOB_FLAGS)
    if a.array:
        res = c.submit({"job": body, "array": a.array}, path="/jobs/array")
        if not emit(res, a.output):
            tasks = res["tasks"]
            lim = f", at most {res['limit']} at a time" if res.get("limit") else ""
            print(f"job array {res['name']} (id {res['array_job_id']}) submitted for team {res['team']}: "
                  f"{len(tasks)} tasks {res['indices']}{lim}")
        return 0
    job = c.submit(body)
    if not emit(job, a.output):
        print(f"job {job['name']} (id {job['id']}) submitted for team {job['team']}: {job['state']} — {job['reason']}")
    return 0


# -- reading jobs ------------------------------------------------------------------------------------------


def _nodes_acc(j: dict[str, Any]) -> str:
    elastic = f" ({j['min_nodes']}-{j['max_nodes']})" if j.get("max_nodes") else ""
    return f"{j['nodes']}x{j['accelerators_per_node']}{elastic}"


def group_arrays(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per job array (name[first-last], its states counted), the other jobs as they are."""
    out: list[dict[str, Any]] = []
    arrays: dict[tuple[str, int], dict[str, Any]] = {}
    for j in jobs:
        arr = j.get("array")
        if not arr:
            out.append({**j, "age": ago(j["submit_time"]), "nodes_acc": _nodes_acc(j)})
            continue
        key = (j["team"], arr["job_id"])
        row = arrays.get(key)
        if row is None:
            row = arrays[key] = {"array_job_id": arr["job_id"], "name": arr["name"], "team": j["team"],
                                 "priority": j["priority"], "nodes_acc": _nodes_acc(j), "restarts": 0,
                                 "age": ago(j["submit_time"]), "_ids": [], "_states": {}}
            out.append(row)
        row["_ids"].append(arr["task_id"])
        row["_states"][j["state"]] = row["_states"].get(j["state"], 0) + 1
        row["restarts"] += j["restarts"]
    for row in arrays.values():
        ids = sorted(row.pop("_ids"))
        states = row.pop("_states")
        span = f"[{ids[0]}-{ids[-1]}]" if len(ids) > 1 else str(ids[0])
        row["id"] = f"{row.pop('array_job_id')}_{span}"  # Slurm's JOBID_[first-last]
        row["state"] = "Array" if len(states) > 1 else next(iter(states))
        row["reason"] = f"{len(ids)} tasks: " + ", ".join(f"{n} {s}" for s, n in states.items())
    return out


def list_jobs(a: argparse.Namespace) -> int:
    c = Client()
    res = c.get("/jobs", team=a.team, state=a.status, limit=a.limit)
    if emit(res["jobs"], a.output):
        return 0
    if any("borrowing" in (j["reason"] or "") for j in res["jobs"]):
        sizes = node_sizes(c)
        res["jobs"] = [{**j, "reason": reason_in_units(j["reason"], sizes.get(j["instance_type"]))}
                       for j in res["jobs"]]
    rows = ([{**j, "age": ago(j["submit_time"]), "nodes_acc": _nodes_acc(j)} for j in res["jobs"]]
            if a.array_tasks else group_arrays(res["jobs"]))
    for r in rows:
        r["eta"] = estimate_text(r.get("estimated_start"), short=True)
    table(rows, [("id", "ID"), ("name", "NAME"), ("team", "TEAM"), ("state", "STATE"), ("priority", "PRIORITY"),
                 ("nodes_acc", "NODES"), ("restarts", "RESTARTS"), ("age", "AGE"), ("eta", "EST. START"),
                 ("reason", "REASON")])
    if res.get("truncated"):
        print(f"(the newest {res['count']} of {res['total']} jobs; --limit 0 shows all)", file=sys.stderr)
    return 0


def _ref(a: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    job_name = getattr(a, "job_name", None)
    if a.job and job_name and a.job != job_name:
        raise CliError(f"NAME {a.job!r} and --job-name {job_name!r} name different jobs: give one")
    ref = a.job or job_name
    if not ref:
        raise CliError("which job? give its name (or id), or --job-name NAME")
    return ref, ({"team": a.team} if a.team else {})


def node_sizes(c: Client) -> dict[str, int | None]:
    """Accelerators per node of each instance type (to say how many nodes a number of accelerators is)."""
    cap = c.get("/cluster")["capacity"]
    return {k: (v["accelerators"] // v["nodes"] if v["nodes"] else None) for k, v in cap.items()}


def borrowed_text(j: dict[str, Any], per_node: int | None) -> str:
    """'john: 4 acc (1 node)' per lending team."""
    return ", ".join(f"{team}: {acc_nodes(n, per_node)}" for team, n in j["borrowed_from"].items()) or "-"


def estimate_text(ts: float | None, *, short: bool = False) -> str:
    """An estimated start, said to be one: 'in 12m (estimate)', 'now (estimate)'; '-' when unknown."""
    if ts is None:
        return "-"
    s = int(ts - time.time())
    when = "now" if s <= 0 else (f"in {s}s" if s < 120 else f"in {s // 60}m" if s < 7200 else f"in {s // 3600}h")
    if short:
        return f"~{when}"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(max(ts, time.time())))
    return (f"{when}, {stamp} (an estimate: running jobs end at their expected durations, nothing new "
            "arrives)")


def get_job(a: argparse.Namespace) -> int:
    ref, params = _ref(a)
    c = Client()
    j = c.get(f"/jobs/{ref}", **params)
    if emit(j, a.output):
        return 0
    if j.get("array_tasks") is not None:
        return _array_summary(j)
    borrowing = j["borrowed_from"] or any("borrowing" in (t or "") for t in [j["reason"], *(e["message"] for e in j["events"])])
    per = node_sizes(c).get(j["instance_type"]) if borrowing else None
    arr = j.get("array")
    fields = [("Name", j["name"]), ("Id", j["id"]), ("Team", j["team"]), ("State", j["state"]),
              ("Reason", reason_in_units(j["reason"], per)), ("Priority", j["priority"] or "(none: lowest)"),
              ("Queue position", j["queue_position"]),
              ("Estimated start", estimate_text(j["estimated_start"]) if j["state"] == "Pending" else None),
              ("Instance type", j["instance_type"]),
              ("Nodes", f"{j['nodes']} x {plural(j['accelerators_per_node'], 'accelerator')}" + (
                  f" (elastic: {j['min_nodes']} to {j['max_nodes']})" if j.get("max_nodes") else "")),
              ("Placement", ", ".join(j["placement"]) or "-"),
              ("Topology", topology_text(j.get("topology"))),
              ("Borrowed from", borrowed_text(j, per)),
              ("Restarts", f"{j['restarts']} of {j['max_retry']}" + (" (auto-resume)" if j["auto_resume"] else
                                                                     " (no auto-resume)")),
              ("Preemptions", j["preemptions"]), ("Checkpoint", _checkpoint(j["checkpoint"])),
              ("Goodput", goodput_text(j.get("goodput"))),
              ("Command", " ".join(j["command"]))]
    if j.get("image"):  # a container's: the command runs in it
        fields.append(("Image", j["image"] + (f" (pull {j['image_pull_policy']})" if j.get("image_pull_policy")
                                              else "")))
    if arr:
        fields.insert(2, ("Array", f"{arr['name']}, task {arr['task_id']} (array job {arr['job_id']})"))
    if j.get("user"):
        fields.insert(3, ("User", j["user"]))
    if j.get("kind") in KINDS:
        fields.insert(2, ("Kind", KINDS[j["kind"]].format(name=j["name"])))
    for k, v in fields:
        print(f"{k + ':':16} {v if v is not None else '-'}")
    print("Events:")
    for e in j["events"][-20:]:
        print(f"  {ago(e['ts']):>4} ago  {e['kind']:<16} {reason_in_units(e['message'], per)}")
    return 0


def _array_summary(j: dict[str, Any]) -> int:
    """get-job of a whole job array: its tasks counted by state, then one line per task."""
    arr, tasks = j["array"] or {}, j["array_tasks"]
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t["state"]] = counts.get(t["state"], 0) + 1
    print(f"{'Array:':16} {arr.get('name', j['name'])} (array job {arr.get('job_id', j['id'])}), {len(tasks)} tasks"
          + (f", at most {arr['limit']} at a time" if arr.get("limit") else ""))
    print(f"{'Team:':16} {j['team']}")
    print(f"{'States:':16} " + ", ".join(f"{n} {k.lower()}" for k, n in counts.items()))
    print(f"{'Command:':16} {' '.join(j['command'])}")
    table([{**t, "id": task_ref(arr.get('job_id', j['id']), t['task_id'])} for t in tasks],
          [("id", "TASK"), ("name", "NAME"), ("state", "STATE"), ("reason", "REASON")])
    print(f"(one task: fairpod get-job {tasks[0]['name']} or {task_ref(arr.get('job_id', j['id']), tasks[0]['task_id'])})")
    return 0


def topology_text(t: dict[str, Any] | None) -> str | None:
    """'requires one rack; placed in rack r1 (block b0)' — None where the cluster has no topology levels."""
    if not t:
        return None
    ask = (f"requires one {t['required']}" if t.get("required") else
           f"prefers one {t['preferred']}" if t.get("preferred") else "no constraint")
    placed = t.get("placed")
    if not placed:
        return ask
    levels = list(placed)
    inner = levels[-1]
    where = f"{inner} {', '.join(placed[inner])}" if len(placed[inner]) == 1 else \
        f"{len(placed[inner])} {inner}s ({', '.join(placed[inner])})"
    outer = [f"{lv} {', '.join(placed[lv])}" for lv in reversed(levels[:-1])]
    return f"{ask}; placed in {where}" + (f" ({'; '.join(outer)})" if outer else "")


def _checkpoint(c: dict[str, Any]) -> str:
    """The last reported checkpoint: path (step N, T ago), as fairpod.sdk.report_progress sent it."""
    if not c.get("path") and c.get("step") is None:
        return "- (the job reports none: fairpod.sdk.report_progress(step=…, checkpoint=…))"
    extra = [f"step {c['step']}"] if c.get("step") is not None else []
    if c.get("at"):
        extra.append(f"{ago(c['at'])} ago")
    return f"{c.get('path') or '(no file)'} ({', '.join(extra)})" if extra else c["path"]


def cancel_job(a: argparse.Namespace) -> int:
    ref, params = _ref(a)
    try:
        j = Client().post(f"/jobs/{ref}/cancel", **params)
    except TimedOut as e:  # a large array's cancel takes longer than the client waits: it goes on
        from fairpod.cli import cancel_wait

        done = cancel_wait.follow(ref, params, e)
        tasks = done.get("array_tasks")
        if tasks is None:
            j = done
        else:
            arr = done.get("array") or {}
            j = {"array_job_id": arr.get("job_id", done["id"]), "name": arr.get("name", done["name"]),
                 "team": done["team"], "tasks": len(tasks), "cancelled": [t for t in tasks if t["state"] == "Cancelled"]}
    if emit(j, a.output):
        return 0
    if "cancelled" in j:  # a whole job array
        print(f"job array {j['name']} (id {j['array_job_id']}): cancelled {len(j['cancelled'])} of its "
              f"{j['tasks']} tasks" + ("" if j["cancelled"] else " (all had finished)"))
    else:
        print(f"job {j['name']}: {j['state']} — {j['reason']}")
    return 0


def list_pods(a: argparse.Namespace) -> int:
    ref, params = _ref(a)
    res = Client().get(f"/jobs/{ref}/replicas", **params)
    if emit(res, a.output):
        return 0
    table(res["replicas"], [("replica", "REPLICA"), ("node", "NODE"), ("accelerators", "ACCELERATORS"),
                            ("state", "STATE"), ("exit", "EXIT")])
    if not res["replicas"]:
        print(f"(job {res['job']} is {res['state']}: it has no replicas now)", file=sys.stderr)
    return 0


WAIT_POLL = 1.0  # seconds between looks at a pending job that --follow waits for


def get_logs(a: argparse.Namespace) -> int:
    c = Client()
    ref, params = _ref(a)
    job = c.get(f"/jobs/{ref}", **params)
    if job.get("array_tasks") and not ref.isdigit():
        t = job["array_tasks"][0]
        raise CliError(f"{ref!r} is a job array of {len(job['array_tasks'])} tasks: name one, e.g. {t['name']} "
                       f"or {task_ref(job['array']['job_id'], t['task_id'])}")
    params["team"] = job["team"]
    ref = str(job["id"])
    never_ran = job["state"] == "Pending" and job.get("first_started_at") is None
    if never_ran and not a.follow:
        print(f"job {job['name']} is Pending and has not run yet: {job['reason']} (get-logs --follow waits for "
              "it to start)", file=sys.stderr)
        return 0
    if never_ran:
        print(f"job {job['name']} is Pending: {job['reason']}; waiting for it to start…", file=sys.stderr)
        while job["state"] == "Pending":
            time.sleep(WAIT_POLL)
            job = c.get(f"/jobs/{ref}", **params)
    out = sys.stdout.buffer
    if not a.all_replicas:
        if a.replica >= job["nodes"]:
            raise CliError(f"--replica {a.replica}: job {job['name']} has replicas 0..{job['nodes'] - 1}")
        wrote = 0
        for chunk in c.stream(f"/jobs/{ref}/logs", replica=a.replica, follow=a.follow, tail=a.tail, **params):
            out.write(chunk)
            out.flush()
            wrote += len(chunk)
        return 0 if wrote else _no_logs(c, ref, params, f"replica {a.replica}")
    return _all_replicas(c, ref, job["nodes"], a.follow, {**params, "tail": a.tail})


def _no_logs(c: Client, ref: str, params: dict[str, Any], what: str) -> int:
    """Nothing came back: say why. A job that ended without output (it failed or was cancelled before it
    started, or its command printed nothing) is an error; a running one just has not printed yet."""
    job = c.get(f"/jobs/{ref}", **params)
    if job["state"] in ("Failed", "Cancelled"):
        never = "before it started" if "could not start" in (job["reason"] or "") or not job.get(
            "first_started_at") else "without any output"
        print(f"job {job['name']} has no logs: it {job['state'].lower()} {never} ({job['reason']})",
              file=sys.stderr)
        return 1
    if job["state"] == "Succeeded":
        print(f"job {job['name']} succeeded without any output ({what} printed nothing)", file=sys.stderr)
    return 0


def _all_replicas(c: Client, ref: str, n: int, follow: bool, params: dict[str, Any]) -> int:
    """Every replica's output, line by line with a '[i] ' prefix; one connection per replica."""
    import threading

    out = sys.stdout.buffer
    lock = threading.Lock()
    errors: list[CliError] = []

    def pump(i: int) -> None:
        cl = Client(c.url, c.headers["Authorization"].removeprefix("Bearer "))
        rest = b""
        prefix = f"[{i}] ".encode()
        try:
            for chunk in cl.stream(f"/jobs/{ref}/logs", replica=i, follow=follow, **params):
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                if lines:
                    with lock:
                        out.write(b"".join(prefix + ln + b"\n" for ln in lines))
                        out.flush()
            if rest:
                with lock:
                    out.write(prefix + rest + b"\n")
                    out.flush()
        except CliError as e:
            errors.append(e)

    threads = [threading.Thread(target=pump, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    if errors:
        raise errors[0]
    return 0
