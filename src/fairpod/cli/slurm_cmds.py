"""Slurm's commands on fairpod: sbatch, squeue, sinfo, scancel (see docs/slurm.md)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.output import emit, emit_json, natural
from fairpod.formats.slurm.hostlist import compress
from fairpod.model.jobflags import JOB_FLAGS, SBATCH_FIELDS, dest
from fairpod.model.keys import task_ref

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any

STATE_CODES = {"Pending": "PD", "Running": "R", "Preempted": "PR", "Succeeded": "CD", "Failed": "F",
               "Cancelled": "CA"}
STATE_NAMES = {"PD": "Pending", "PENDING": "Pending", "R": "Running", "RUNNING": "Running", "PR": "Preempted",
               "PREEMPTED": "Preempted", "CD": "Succeeded", "COMPLETED": "Succeeded", "F": "Failed",
               "FAILED": "Failed", "CA": "Cancelled", "CANCELLED": "Cancelled"}

SBATCH_HELP = """Submit a Slurm batch script as a fairpod job: #SBATCH directives (and fairpod's own #FAIRPOD
lines) are read from the top of the script; options given here win over them. The script runs once, on the
job's first node, with the SLURM_* variables and an srun that starts commands on every node of the job
(srun --auto-resume=1 means the job's auto-resume). Prints 'Submitted batch job ID'."""
SBATCH_EPILOG = """directives: -J/--job-name, -N/--nodes, --ntasks-per-node, -n/--ntasks, --gres=gpu:N, -G/--gpus,
--gpus-per-node, -o/--output and -e/--error (%x job name, %j job id, %N node, %u user), --open-mode,
--exclusive, --wait-all-nodes, --requeue/--no-requeue, -A/--account (team), -p/--partition (instance type),
-q/--qos (priority class), -D/--chdir, --export, -a/--array (a job array: 0-199%16 runs at most 16 tasks at
a time; each task gets SLURM_ARRAY_TASK_ID, %a and %A in file names). #FAIRPOD: --team, --priority,
--auto-resume, --no-auto-resume, --max-retry (with auto-resume), --instance-type, --accelerators, --grace-seconds,
--min-runtime, --required-topology, --preferred-topology. Unknown #SBATCH options are reported and ignored; --dependency and --hold are refused.
example: fairpod sbatch 1.conda-train.sbatch"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sbatch", help="submit a Slurm batch script", description=SBATCH_HELP, epilog=SBATCH_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("Slurm options (override the script's #SBATCH lines)")
    for flags, key in ((("-J", "--job-name"), "job_name"), (("-N", "--nodes"), "nodes"),
                       (("--ntasks-per-node",), "ntasks_per_node"), (("-n", "--ntasks"), "ntasks"),
                       (("--gres",), "gres"), (("-G", "--gpus"), "gpus"), (("--gpus-per-node",), "gpus_per_node"),
                       (("-o", "--output"), "output"), (("-e", "--error"), "error"),
                       (("--open-mode",), "open_mode"), (("--wait-all-nodes",), "wait_all_nodes"),
                       (("-A", "--account"), "account"), (("-p", "--partition"), "partition"),
                       (("-q", "--qos"), "qos"), (("-D", "--chdir"), "chdir"), (("--export",), "export"),
                       (("-a", "--array"), "array")):
        g.add_argument(*flags, dest=f"s_{key}", metavar=key.upper())
    for flag, key in (("--exclusive", "exclusive"), ("--requeue", "requeue"), ("--no-requeue", "no_requeue")):
        g.add_argument(flag, dest=f"s_{key}", action="store_true", default=None)
    from fairpod.formats.slurm import pyxis

    c = p.add_argument_group("pyxis's options: the batch script runs in the image (docs/slurm.md)")
    for flag, key in pyxis.VALUE.items():
        c.add_argument(flag, dest=f"s_{key}", metavar=key.split("_")[-1].upper())
    for flag, key in pyxis.FLAGS.items():
        c.add_argument(flag, dest=f"s_{key}", action="store_true", default=None)
    f = p.add_argument_group("fairpod options (override the script's #FAIRPOD lines)")
    for field in SBATCH_FIELDS:  # start-job's flags for them (the #FAIRPOD lines take the same: formats.slurm.sbatch)
        f.add_argument(JOB_FLAGS[field], dest=f"s_{dest(field)}", metavar=dest(field).upper())
    for flag, key in (("--auto-resume", "auto_resume"), ("--no-auto-resume", "no_auto_resume")):
        f.add_argument(flag, dest=f"s_{key}", action="store_true", default=None)
    p.add_argument("--parsable", action="store_true", help="print only the job id")
    p.add_argument("--json", action="store_true", help="print the submitted job as JSON")
    p.add_argument("-W", "--wait", action="store_true",
                   help="wait for the job to end; exit 0 if it succeeded, else its first replica's exit code or 1")
    p.add_argument("--test-only", action="store_true", help="check the script and print the job, submit nothing")
    p.add_argument("script", metavar="SCRIPT", nargs="?",
                   help="the batch script (none: the script is read from stdin, as in 'sbatch < job.sh')")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments of the script")
    p.set_defaults(func=sbatch)

    p = sub.add_parser("squeue", add_help=False, help="list jobs in Slurm's columns",
                       description="List jobs as Slurm's squeue does: JOBID PARTITION (instance type) NAME "
                       "USER ACCOUNT (team) ST TIME NODES NODELIST(REASON). Pending and running jobs by default.")
    p.add_argument("--help", action="help", help="show this help and exit")
    p.add_argument("-A", "--account", help="only this team's jobs (comma-separated list)")
    p.add_argument("-j", "--jobs", help="only these job ids (comma-separated)")
    p.add_argument("-n", "--name", help="only jobs of these names (comma-separated)")
    p.add_argument("-p", "--partition", help="only jobs of these instance types (comma-separated)")
    p.add_argument("-t", "--states", help="PD,R,PR,CD,F,CA (or PENDING, RUNNING, …) or 'all'")
    p.add_argument("-h", "--noheader", action="store_true", help="no header line")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("-o", "--format", dest="fmt", type=_format, metavar="json|yaml", help="print JSON or YAML")
    p.set_defaults(func=squeue)

    p = sub.add_parser("sinfo", add_help=False, help="list partitions and node states in Slurm's columns",
                       description="List nodes as Slurm's sinfo does: one partition per instance type, nodes "
                       "grouped by state (idle, mix, alloc, drain, drng, down).")
    p.add_argument("--help", action="help", help="show this help and exit")
    p.add_argument("-p", "--partition", help="only these instance types (comma-separated)")
    p.add_argument("-N", "--Node", dest="node_oriented", action="store_true", help="one line per node")
    p.add_argument("-h", "--noheader", action="store_true", help="no header line")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("-o", "--format", dest="fmt", type=_format, metavar="json|yaml", help="print JSON or YAML")
    p.set_defaults(func=sinfo)

    p = sub.add_parser("scancel", help="cancel jobs (Slurm's scancel)",
                       description="Cancel jobs by id or name; running replicas get SIGTERM, then SIGKILL after "
                       "the job's grace period. Prints nothing on success, like Slurm.")
    p.add_argument("jobs", nargs="+", metavar="JOB", help="job id or name")
    p.add_argument("--json", action="store_true", help="print the cancelled jobs as JSON")
    p.set_defaults(func=scancel)


def _format(v: str) -> str:
    if v.lower() in ("json", "yaml"):
        return v.lower()
    raise argparse.ArgumentTypeError(f"{v!r}: Slurm's format strings are not supported; use -o json, -o yaml or "
                                     "--json")


def _emit(a: argparse.Namespace, data: Any) -> bool:
    return emit(data, "json" if a.json else (a.fmt or "table"))


# -- sbatch ----------------------------------------------------------------------------------------------


def _cli_settings(a: argparse.Namespace) -> list[Any]:
    from fairpod.formats.slurm.sbatch import Setting

    return [Setting(k[2:], v, "command line") for k, v in vars(a).items() if k.startswith("s_") and v is not None]


def _team(c: Client) -> str:
    """The team of a script that names none: the submitter's only team, else the cluster's only one."""
    me = c.get("/me")
    if me.get("role") == "member" and len(me.get("teams") or []) == 1:
        return str(me["teams"][0])
    teams = [t["name"] for t in c.get("/teams")["teams"]]
    if len(teams) == 1:
        return teams[0]
    raise CliError("which team? add '#FAIRPOD --team NAME' or '#SBATCH --account=NAME' to the script, or pass "
                   f"--team (teams: {', '.join(teams) or 'none'})")


# the fairpod flags that jobbody.finish's messages name, as sbatch takes them: the setting (its key) and its words
SAID = {"--max-retry": ("max_retry", "#FAIRPOD --max-retry"), "--name": ("job_name", "#SBATCH --job-name"),
        "--image": ("container_image", "#SBATCH --container-image"),
        "--mount": ("container_mounts", "#SBATCH --container-mounts")}
AT_SUBMIT = ("no team named (#FAIRPOD --team or #SBATCH --account): at submit the job goes to your only team, or to "
             "the cluster's only team; --test-only asks no server")


def said(bs: Any) -> dict[str, str]:
    """fairpod's flags in the words the user typed to sbatch (or srun) and where: ``job.sbatch line 7: #FAIRPOD
    --max-retry`` for a line of the script, the flag itself for the command line. The one mapping of this front
    end, for the messages of the checks every job body goes through (fairpod.cli.jobbody.finish)."""
    def at(origin: str | None) -> str:  # the script's file and line, or nothing for the command line
        return f"{bs.path} {origin}" if origin and origin.startswith("line ") else ""

    out = {flag: f"{at(bs.origin(key))}: {words}" if at(bs.origin(key)) else words.split()[-1]
           for flag, (key, words) in SAID.items() if bs.origin(key) is not None}
    fix = "#SBATCH --requeue or #FAIRPOD --auto-resume" if at(bs.origin("max_retry")) else "--requeue or --auto-resume"
    off = next((s for s in reversed(bs.settings) if s.key in ("auto_resume", "no_auto_resume", "requeue",
                                                                 "no_requeue")), None)
    if off is not None and off.key.startswith("no_"):  # turned off on purpose: say which line to change
        fix += f" in place of --{off.key.replace('_', '-')}" + (f" ({at(off.origin)})" if at(off.origin) else "")
    return {**out, "--auto-resume": fix}


def finish_job(bs: Any, body: dict[str, Any], c: Client | None) -> dict[str, Any]:
    """The batch job's body through the checks and defaults of every job body, said in sbatch's words; a script
    without a team gets the submitter's only team or the cluster's only one (``_team``), and none without a
    server (``c`` None: --test-only), to be resolved at submit."""
    from fairpod.cli.jobbody import finish

    return finish(body, team=(lambda src: _team(c)) if c is not None else (lambda src: None), said=said(bs))


def _submit(c: Client, body: dict[str, Any], array: str | None = None) -> dict[str, Any]:
    """POST /jobs (or /jobs/array); Slurm allows many jobs of one name, so a taken name gets a suffix (-2, …)."""
    base = body["name"]
    for n in range(1, 51):
        if n > 1:
            body["name"] = f"{base[: 63 - len(str(n)) - 1]}-{n}"
        try:
            if array is not None:
                res = c.submit({"job": body, "array": array}, path="/jobs/array")
                return {**res, "id": res["array_job_id"]}
            return dict(c.submit(body))
        except CliError as e:
            if e.status != 409 or "Idempotency" in str(e):  # 409: the team has an unfinished job of that name
                raise
    raise CliError(f"job names {base}, {base}-2 … {base}-50 are all taken by unfinished jobs")


def _exit_code(job: dict[str, Any]) -> int:
    if job["state"] == "Succeeded":
        return 0
    first = (job.get("exit") or {}).get("0") or ""
    if first.startswith("exited "):
        try:
            return int(first.split()[1]) or 1
        except ValueError:
            pass
    return 1


def _stdin_script() -> str:
    """The batch script given on stdin (``sbatch < job.sh``, a here-document), as Slurm reads it."""
    from fairpod.formats.slurm.sbatch import MAX_SCRIPT

    if sys.stdin is None or sys.stdin.isatty():
        raise CliError("no batch script: give SCRIPT, or the script on stdin (sbatch < job.sh)")
    raw = sys.stdin.buffer.read(MAX_SCRIPT + 1)
    if len(raw) > MAX_SCRIPT:
        raise CliError(f"the script on stdin is over {MAX_SCRIPT // 1024} KiB; batch scripts are limited to that")
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise CliError("the script on stdin is not a text file (not UTF-8)") from None


def sbatch(a: argparse.Namespace) -> int:
    from fairpod.formats.slurm.sbatch import BatchError, read_script, to_job, unknown_patterns

    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    try:
        bs = read_script(a.script) if a.script else read_script("sbatch", _stdin_script())
        bs.settings.extend(_cli_settings(a))
    except BatchError as e:
        raise CliError(str(e)) from None
    for key in ("output", "error"):
        for pat in unknown_patterns(bs.get(key)):
            bs.warnings.append(f"--{key} {bs.get(key)}: %{pat} is not a pattern fairpod knows; it stays as is")
    c = None if a.test_only else Client()
    try:
        body, notes = to_job(bs, args, cwd=os.getcwd(), environ=dict(os.environ), python=sys.executable)
    except BatchError as e:
        raise CliError(str(e)) from None
    body = finish_job(bs, body, c)
    if "team" not in body:
        notes.append(AT_SUBMIT)
    for w in bs.warnings:
        print(f"sbatch: warning: {w}", file=sys.stderr)
    for n in notes:
        print(f"sbatch: {n}", file=sys.stderr)
    if a.test_only:
        shown = {**body, "env": {k: ("<script and options>" if k == "FAIRPOD_SBATCH" else v)
                                 for k, v in body["env"].items()}}
        if a.json:
            emit_json({"job": shown, "warnings": bs.warnings, "notes": notes})
        else:
            team = f"team {body['team']}" if "team" in body else "the team chosen at submit"
            print(f"sbatch: job {body['name']} for {team}: {body['nodes']} node(s)"
                  f"{', ' + str(body['accelerators']) + ' accelerators each' if 'accelerators' in body else ''}"
                  f", auto-resume {'on' if body['auto_resume'] else 'off'}; not submitted (--test-only)")
        return 0
    assert c is not None
    job = _submit(c, body, bs.get("array"))
    if a.json:
        emit_json(job)
    elif a.parsable:
        print(job["id"])
    else:
        print(f"Submitted batch job {job['id']}")
    sys.stdout.flush()
    if not a.wait:
        return 0
    while True:
        job = c.get(f"/jobs/{job['id']}")
        if job["state"] in ("Succeeded", "Failed", "Cancelled"):
            return _exit_code(job)
        time.sleep(1.0)


# -- squeue / sinfo / scancel ----------------------------------------------------------------------------


def elapsed(seconds: float) -> str:
    """Slurm's TIME: M:SS, H:MM:SS or D-HH:MM:SS."""
    s = max(0, int(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{s:02d}"
    if h:
        return f"{h}:{m:02d}:{s:02d}"
    return f"{m}:{s:02d}"


def _states(arg: str | None) -> list[str] | None:
    if arg is None:
        return ["Pending", "Running", "Preempted"]
    if arg.strip().lower() == "all":
        return None
    out = []
    for s in arg.split(","):
        name = STATE_NAMES.get(s.strip().upper())
        if name is None:
            raise CliError(f"unknown job state {s!r} (PD, R, PR, CD, F, CA or all)")
        out.append(name)
    return out


def _csv(v: str | None) -> set[str] | None:
    return {x.strip() for x in v.split(",") if x.strip()} if v else None


def squeue_rows(jobs: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    rows = []
    for j in jobs:
        started = j.get("started_at")
        if j["state"] in ("Running", "Preempted") and started:
            t = now - started
        elif j.get("finished_at") and started:
            t = j["finished_at"] - started
        else:
            t = 0
        where = compress(j["placement"]) if j["state"] in ("Running", "Preempted") and j["placement"] else \
            f"({j.get('reason') or 'None'})"
        arr = j.get("array")
        rows.append({"job_id": task_ref(arr['job_id'], arr['task_id']) if arr else j["id"], "partition": j["instance_type"], "name": j["name"], "user": j.get("user") or "-", "account": j["team"],
                     "state": j["state"], "st": STATE_CODES.get(j["state"], "?"), "time": elapsed(t),
                     "nodes": j["nodes"], "nodelist": where, "priority": j.get("priority"),
                     "restarts": j.get("restarts"), "reason": j.get("reason")})
    return rows


def squeue(a: argparse.Namespace) -> int:
    states = _states(a.states)
    params: dict[str, Any] = {"limit": 100_000}
    if states:
        params["state"] = states
    jobs = Client().get("/jobs", **params)["jobs"]
    teams, ids, names, parts = _csv(a.account), _csv(a.jobs), _csv(a.name), _csv(a.partition)
    jobs = [j for j in jobs if (teams is None or j["team"] in teams) and (ids is None or str(j["id"]) in ids)
            and (names is None or j["name"] in names) and (parts is None or j["instance_type"] in parts)]
    rows = squeue_rows(jobs, time.time())
    if _emit(a, {"jobs": rows}):
        return 0
    # Slurm's default format: %.18i %.9P %.8j %.8u %.2t %.10M %.6D %R, and ACCOUNT (the team) after USER
    cols = [("job_id", "JOBID", 18), ("partition", "PARTITION", 9), ("name", "NAME", 8), ("user", "USER", 8),
            ("account", "ACCOUNT", 8), ("st", "ST", 2), ("time", "TIME", 10), ("nodes", "NODES", 6)]
    if not a.noheader:
        print(" ".join(h[:w].rjust(w) for _, h, w in cols) + " NODELIST(REASON)")
    for r in rows:
        print(" ".join(str(r[k])[:w].rjust(w) for k, _, w in cols) + " " + r["nodelist"])
    return 0


def node_state(n: dict[str, Any]) -> str:
    busy = bool(n.get("jobs"))
    if n.get("cordoned"):
        return "drng" if busy else "drain"
    if n.get("health_status") != "Schedulable":
        return "down"
    if not busy:
        return "idle"
    acc, free = n.get("accelerators") or 0, n.get("accelerators_free") or 0
    return "alloc" if (acc and free == 0) or not acc else "mix"


def sinfo(a: argparse.Namespace) -> int:
    c = Client()
    nodes = c.get("/nodes")["nodes"]
    types = sorted({n["instance_type"] for n in nodes})
    wanted = _csv(a.partition)
    default = types[0] if len(types) == 1 else None
    rows: list[dict[str, Any]] = []
    for it in types:
        if wanted is not None and it not in wanted:
            continue
        part = it + ("*" if it == default else "")
        members = sorted((n for n in nodes if n["instance_type"] == it), key=lambda n: natural(n["name"]))
        if a.node_oriented:
            rows += [{"nodelist": n["name"], "nodes": 1, "partition": part, "state": node_state(n)} for n in members]
            continue
        by_state: dict[str, list[str]] = {}
        for n in members:
            by_state.setdefault(node_state(n), []).append(n["name"])
        for st, names in by_state.items():
            rows.append({"partition": part, "avail": "up", "timelimit": "infinite", "nodes": len(names),
                         "state": st, "nodelist": compress(names)})
    if _emit(a, {"nodes" if a.node_oriented else "partitions": rows, "host": socket.gethostname()}):
        return 0
    if a.node_oriented:
        w = max([8] + [len(r["nodelist"]) for r in rows])
        pw = max([9] + [len(r["partition"]) for r in rows])
        if not a.noheader:
            print(f"{'NODELIST'.ljust(w)}  NODES {'PARTITION'.ljust(pw)} STATE")
        for r in rows:
            print(f"{r['nodelist'].ljust(w)}  {r['nodes']:>5} {r['partition'].ljust(pw)} {r['state']}")
        return 0
    pw = max([9] + [len(r["partition"]) for r in rows])
    if not a.noheader:
        print(f"{'PARTITION'.ljust(pw)} {'AVAIL':>5} {'TIMELIMIT':>10} {'NODES':>6} {'STATE':>6} NODELIST")
    for r in rows:
        print(f"{r['partition'].ljust(pw)} {r['avail']:>5} {r['timelimit']:>10} {r['nodes']:>6} {r['state']:>6} "
              f"{r['nodelist']}")
    return 0


def scancel(a: argparse.Namespace) -> int:
    c = Client()
    done, failed = [], 0
    for ref in a.jobs:
        try:  # the server takes Slurm's refs: A (the whole array), A_T (one task), a job id or name
            res = c.post(f"/jobs/{ref}/cancel")
            done.extend(res["cancelled"] if "cancelled" in res else [res])
        except CliError as e:
            print(f"scancel: error: job {ref}: {e}", file=sys.stderr)
            failed += 1
    if a.json:
        emit_json({"cancelled": done})
    return 1 if failed else 0
