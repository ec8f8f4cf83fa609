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
    _team_flags,
    array_spec,
    job_body,
    job_flag,
    team_name,
    whole,
)
from fairpod.cli.output import add_output, emit
from fairpod.model.jobflags import JOB_FLAGS

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
    job_flag(p, "name", "--job-name", help="job name (lower-case letters, digits, '-')")
    _team_flags(p, required_hint=True)
    job_flag(p, "priority",
                   help="priority class (see 'fairpod policy show'); HyperPod's <class>-priority works too")
    job_flag(p, "instance_type", help="instance type (default: the cluster's only one); several, comma-"
                   "separated in order of preference (ml.p5.48xlarge,ml.p4d.24xlarge): it starts on the first that "
                   "fits now")
    job_flag(p, "nodes", help="replicas, one per node (default 1)")
    job_flag(p, "min_nodes", metavar="N",
                   help="elastic: start with N replicas when only N fit (default --node-count; needs --max-nodes)")
    job_flag(p, "max_nodes", metavar="M",
                   help="elastic: grow into idle capacity up to M replicas; when capacity is reclaimed the replicas "
                   "above N get SIGTERM and go instead of the whole job (FAIRPOD_MIN_NODES, FAIRPOD_MAX_NODES, "
                   "FAIRPOD_NODES; e.g. torchrun --nnodes $FAIRPOD_MIN_NODES:$FAIRPOD_MAX_NODES --rdzv-backend c10d)")
    job_flag(p, "accelerators",
                   help="whole accelerators per node (default: the whole node)")
    job_flag(p, "vcpu", metavar="N",
                   help="vCPUs per replica (default: by the node type's ratio to --accelerators); the replica is held "
                   "to them by its cgroup")
    job_flag(p, "memory_gib", metavar="SIZE",
                   help="memory per replica, e.g. 16Gi or 512Mi (default: by ratio); more ends the replica with "
                   "'exceeded its memory limit'")
    job_flag(p, "auto_resume", nargs="?", const=True, metavar="true|false",
                   help="restart the job (up to --max-retry times) when a replica fails or its node does; "
                   "'--auto-resume' alone means true")
    job_flag(p, "max_retry", help="restarts allowed (needs --auto-resume true)")
    job_flag(p, "env", action="append", default=[], metavar="K=V", help="environment variable (repeatable)")
    job_flag(p, "workdir", help="working directory of the replicas (default: this directory; in an --image: "
                   "the image's, and a --workdir given is mounted into the container at its own path)")
    job_flag(p, "image", metavar="REF",
                   help="run each replica in this container image (podman on the node; docs/containers.md); with "
                   "no command after --, the image's own entrypoint runs")
    job_flag(p, "image_pull_policy", choices=["Always", "IfNotPresent", "Never"],
                   help="as Kubernetes: default Always for :latest or no tag, else IfNotPresent")
    job_flag(p, "mounts", action="append", default=[], metavar="HOST:CONTAINER[:ro]",
                   help="with --image: bind a host directory into the container (repeatable)")
    job_flag(p, "scratch", action="append", default=[], metavar="PATH[:MIB]",
                   help="with --image: an empty in-memory directory of the replica's own at PATH, counted in its "
                   "memory (/dev/shm: its size; Kubernetes' emptyDir; repeatable)")
    job_flag(p, "termination_grace_seconds",
                   help="seconds from SIGTERM to SIGKILL when the job is stopped (default 30)")
    job_flag(p, "min_runtime_seconds",
                   help="seconds after each start during which the job is never preempted")
    job_flag(p, "expected_duration_seconds", metavar="SECONDS",
                   help="how long the job runs once started: the estimated start of the jobs behind it counts on "
                   "it, and capacity held for a starving job is lent to it if it ends in time")
    job_flag(p, "deep_health_check_passed_nodes_only", nargs="?", const=True,
                   metavar="true|false",
                   help="run only on nodes whose deep health checks passed (not on nodes never checked)")
    job_flag(p, "max_runtime_seconds", metavar="SECONDS",
                   help="stop each attempt after this many seconds (then Failed or requeued, as the priority "
                   "class says; default and maximum from the class)")
    job_flag(p, "hang_timeout_seconds", metavar="SECONDS",
                   help="the job is hung after this long (10 or more) with no progress report and no output, "
                   "or only idle GPUs")
    job_flag(p, "hang_action", choices=["notify", "restart", "cancel"],
                   help="what a hang does: an event (default), a restart (counts against --max-retry), a cancel")
    job_flag(p, "ready_timeout_seconds", metavar="SECONDS",
                   help="gang readiness: every replica ready within this long of the start, else the attempt is "
                   "stopped and requeued with backoff (default: the policy's ready_timeout_seconds)")
    job_flag(p, "ready_signal", choices=["started", "sdk"],
                   help="what makes a replica ready: its process started (default), or its call of "
                   "fairpod.sdk.ready() or a progress report")
    job_flag(p, "restarts_in_place", metavar="N",
                   help="restart a failed replica's process on its node (the others keep running) up to N times "
                   "within --restart-eval-period before the job restarts whole (--max-retry)")
    job_flag(p, "log_rules", action="append", nargs=3, default=[], metavar=("NAME", "ACTION", "REGEX"),
                   help="a rule over the replicas' output (repeatable). ACTION is notify, restart_in_place, restart "
                   "or fail, and may end in :within=S (no matching line within S s of the start is a fault), "
                   ":every=S (no matching line for S s is) or :metric>X[:points=N] (the number REGEX's first group "
                   "captures is >, >=, < or <= X in N readings in a row of a replica; default 1; a capture that is "
                   "not a number is no reading); otherwise a matching line is the fault. REGEX is RE2 syntax "
                   "(linear time: no backreferences or lookaround), matched per line. E.g. --log-rule nan fail "
                   "'loss[=:] *nan' --log-rule loss restart:every=600 'loss[=:]' --log-rule diverged "
                   "restart:metric>10:points=3 'loss=(\\S+)'")
    job_flag(p, "restart_eval_period_seconds", metavar="SECONDS",
                   help="the window --restarts-in-place counts restarts in (default 3600)")
    job_flag(p, "peer_recovery", nargs="?", const=True, metavar="true|false",
                   help="a replica restarted in place gets its state from a peer's memory (fairpod.sdk.peers) and "
                   "the job goes on from its step; a second replica lost meanwhile restarts the job from its "
                   "checkpoint. Needs --restarts-in-place N")
    job_flag(p, "required_topology", metavar="LEVEL",
                   help="all replicas in one domain of this topology level (e.g. rack), else the job waits")
    job_flag(p, "preferred_topology", metavar="LEVEL",
                   help="replicas in as few domains of this topology level (e.g. rack) as fit now")
    job_flag(p, "accelerator_partition_type", metavar="PROFILE",
                   help="run on nodes whose GPUs are split into this MIG profile (e.g. mig-1g.10gb)")
    job_flag(p, "accelerator_partition_count", metavar="N",
                   help="MIG partitions per node (default 1; needs --accelerator-partition-type)")
    job_flag(p, "ray", nargs="?", const=True, metavar="true|false",
                   help="a Ray job: fairpod starts a private Ray cluster on the replicas (head on rank 0, a worker on "
                   "each other; each Ray node offers exactly the replica's accelerators, vCPUs and memory) and runs "
                   "the command on rank 0 with RAY_ADDRESS set")
    job_flag(p, "array", type=array_spec, metavar="SPEC",
                   help="submit a job array: one task per index (0-199, 1,3,5, 0-99:2), at most N at a time with "
                   "%%N; each task gets FAIRPOD_ARRAY_TASK_ID and SLURM_ARRAY_TASK_ID")
    p.add_argument("--config-file", metavar="FILE", help="job spec as YAML (name, team, command, nodes, …)")
    add_output(p)
    p.set_defaults(func=start_job, job_command=None)

    p = sub.add_parser("list-jobs", help="list jobs of your teams",
                       description="List jobs, newest last; the tasks of a job array are one line unless "
                       "--array-tasks.")
    g = p.add_mutually_exclusive_group()
    job_flag(g, "team", type=team_name, help="only this team's jobs (also hyperpod-ns-<team>)")
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
