"""Data scientists' commands: start-job, list-jobs, get-job (describe), cancel-job, list-pods, get-logs (logs):
their parsers and start-job (the job body and the flag types: fairpod.cli.jobbody; the reads:
fairpod.cli.job_reads).

Flags take the forms HyperPod users type: ``--auto-resume true``, ``--namespace hyperpod-ns-<team>``,
``--queue-name hyperpod-ns-<team>-localqueue``, ``--priority <class>-priority``, ``--all-namespaces``.
"""

from __future__ import annotations

import argparse

from fairpod.cli.client import Client
from fairpod.cli.job_reads import cancel_job, get_job, get_logs, list_jobs, list_pods
from fairpod.cli.jobbody import (
    JOB_FLAGS,
    _team_flags,
    array_spec,
    boolean,
    job_body,
    job_name,
    memory_gib,
    priority_class,
    seconds,
    team_name,
    topology_level,
    vcpus,
    whole,
)
from fairpod.cli.output import add_output, emit

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    pass

STATES = ["Pending", "Running", "Preempted", "Succeeded", "Failed", "Cancelled"]


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
